/* tftrace report page. Everything on screen comes from the report JSON embedded in the page;
   model strings (op names, attrs, scopes) only ever reach the DOM through textContent or
   attribute setters, never as markup. Graph nodes are found through their position in the
   report ("<view>_n12"), never through a raw name in a selector. No network, no libraries. */
(function () {
  "use strict";
  var started = performance.now();
  var R = JSON.parse(document.getElementById("report-data").textContent);
  var P = JSON.parse(document.getElementById("page-data").textContent);
  var SVGNS = document.getElementById("svgns").namespaceURI;
  var names = Object.keys(R.nodes || {});
  var nodes = names.map(function (n) { return R.nodes[n] || {}; });
  var pos = new Map(names.map(function (n, i) { return [n, i]; }));
  var succ = names.map(function () { return []; });
  (R.edges || []).forEach(function (e) {
    var u = pos.get(e[0]), v = pos.get(e[1]);
    if (u !== undefined && v !== undefined) succ[u].push(v);
  });
  var views = new Map(P.views.map(function (v) { return [v.id, v]; }));
  var members = new Map(P.views.map(function (v) { return [v.id, new Set(v.members)]; }));
  var scopeOf = new Array(names.length).fill(-1);
  var scopeByBox = new Map();
  P.scopes.forEach(function (s, k) {
    s.members.forEach(function (i) { scopeOf[i] = k; });
    scopeByBox.set(s.box, k);
  });
  var ORDER = P.order;

  /* ---------------------------------------------------------------- helpers */
  function num(v) {
    if (typeof v === "number") return v;
    if (typeof v === "string") {
      var s = v.trim().toLowerCase();
      if (s === "nan") return NaN;
      if (s === "inf" || s === "+inf" || s === "infinity") return Infinity;
      if (s === "-inf" || s === "-infinity") return -Infinity;
    }
    return null;
  }
  function fmt(v, digits) {
    var x = num(v);
    if (x === null) return v === null || v === undefined ? "—" : String(v);
    if (Number.isNaN(x)) return "NaN";
    if (!Number.isFinite(x)) return x > 0 ? "∞" : "−∞";
    if (x === 0) return "0";
    if (Number.isInteger(x) && Math.abs(x) < 1e6) return String(x);
    return general(x, digits || 3);
  }
  /* Python's "%.{p}g", so a number the page's script writes reads exactly as the same number
     written by the server (tracer/report/numbers.py fmt): 9.73e-05 in both tables, never
     0.0000973 in one of them. */
  function general(x, p) {
    var e = x.toExponential(p - 1), at = e.indexOf("e"), exp = parseInt(e.slice(at + 1), 10);
    if (exp < -4 || exp >= p) {
      var m = trimZeros(e.slice(0, at)), a = Math.abs(exp);
      return m + "e" + (exp < 0 ? "-" : "+") + (a < 10 ? "0" : "") + a;
    }
    return trimZeros(x.toFixed(p - 1 - exp));
  }
  function trimZeros(s) { return s.indexOf(".") >= 0 ? s.replace(/0+$/, "").replace(/\.$/, "") : s; }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  /* A sentence whose `backticked` parts are code (the report's own wording): each part goes on
     screen as text, the code parts inside <code>; unbalanced backticks stay as they are. */
  function prose(tag, cls, text) {
    var e = el(tag, cls), parts = String(text).split("`");
    if (parts.length % 2 === 0) { e.textContent = String(text); return e; }
    parts.forEach(function (part, k) { if (part) e.append(k % 2 ? breakable("code", null, part) : document.createTextNode(part)); });
    return e;
  }
  /* A name as text with a break opportunity after each "/" and "_" (the page's CSS breaks a
     name only there, never a character at a time). */
  function breakable(tag, cls, text) {
    var e = el(tag, cls);
    String(text).split(/(?<=[\/_])/).forEach(function (part, k) {
      if (k) e.append(document.createElement("wbr"));
      e.append(document.createTextNode(part));
    });
    return e;
  }
  function shortName(name) {
    var t = name.replace(/\/+$/, "");
    var k = t.lastIndexOf("/");
    return (k >= 0 ? t.slice(k + 1) : t) || name;
  }
  function clip(text, n) { text = String(text); return text.length > n ? text.slice(0, n - 1) + "…" : text; }
  function statusOf(i) { return nodes[i].status || "not_compared"; }
  function rank(status) { var k = ORDER.indexOf(status); return k < 0 ? ORDER.length - 1.5 : k; }
  function chip(status, text) {
    var s = P.labels[status] ? status : "not_compared";
    return el("span", "chip st-" + s, text || P.labels[s] || status);
  }
  function opLink(i, label) {
    var b = el("button", "linkish", label === undefined ? names[i] : label);
    b.title = names[i];
    b.addEventListener("click", function () { select(i, { locate: true }); });
    return b;
  }
  function show(node, hidden) { node.hidden = !!hidden; }

  /* ---------------------------------------------------------------- pan & zoom */
  function PanZoom(svg, box) {
    var vb = svg.viewBox.baseVal;
    this.base = { x: vb.x, y: vb.y, w: vb.width || 100, h: vb.height || 100 };
    this.svg = svg; this.box = box; this.v = Object.assign({}, this.base);
    svg.setAttribute("preserveAspectRatio", "xMidYMid meet");
  }
  PanZoom.prototype.size = function () { return { w: this.box.clientWidth || 800, h: this.box.clientHeight || 500 }; };
  PanZoom.prototype.scale = function () { return this.size().w / this.v.w; };
  PanZoom.prototype.apply = function () {
    var v = this.v;
    this.svg.setAttribute("viewBox", [v.x, v.y, v.w, v.h].map(function (x) { return x.toFixed(2); }).join(" "));
  };
  PanZoom.prototype.setView = function (cx, cy, k) {
    var s = this.size();
    this.v = { w: s.w / k, h: s.h / k, x: cx - s.w / k / 2, y: cy - s.h / k / 2 };
    this.apply();
  };
  PanZoom.prototype.fitScale = function () {
    var s = this.size(), b = this.base;
    return Math.min(s.w / b.w, s.h / b.h) * 0.97;
  };
  var FIT_MAX = 1.5;  // a small view is enlarged up to this, not blown up to the canvas
  PanZoom.prototype.fit = function () {
    var b = this.base;
    this.setView(b.x + b.w / 2, b.y + b.h / 2, Math.min(this.fitScale(), FIT_MAX));
  };
  PanZoom.prototype.zoom = function (factor, cx, cy) {
    var v = this.v, k0 = this.scale();
    var k = Math.max(Math.min(0.02, this.fitScale() / 2), Math.min(k0 * factor, 6));
    var f = k0 / k;
    this.v = { x: cx - (cx - v.x) * f, y: cy - (cy - v.y) * f, w: v.w * f, h: v.h * f };
    this.apply();
  };
  PanZoom.prototype.centre = function () { return { x: this.v.x + this.v.w / 2, y: this.v.y + this.v.h / 2 }; };
  PanZoom.prototype.toSvg = function (cx, cy) {
    var r = this.box.getBoundingClientRect(), k = this.scale();
    return { x: this.v.x + (cx - r.left) / k, y: this.v.y + (cy - r.top) / k };
  };
  PanZoom.prototype.bbox = function (g) {
    var b = g.getBBox();
    var m = this.svg.getScreenCTM().inverse().multiply(g.getScreenCTM());
    return { x: m.a * b.x + m.c * b.y + m.e, y: m.b * b.x + m.d * b.y + m.f, w: b.width * m.a, h: b.height * m.d };
  };
  PanZoom.prototype.focusOn = function (g) {
    var b = this.bbox(g), k = Math.min(Math.max(this.scale(), 1), 2);
    // Centre in the part of the canvas the details drawer does not cover.
    var drawerBox = document.getElementById("details");
    var hidden = 0;
    if (drawerBox && !drawerBox.hidden) {
      hidden = Math.max(0, this.box.getBoundingClientRect().right - drawerBox.getBoundingClientRect().left);
      hidden = Math.min(hidden, this.size().w * 0.6);
    }
    this.setView(b.x + b.w / 2 + hidden / 2 / k, b.y + b.h / 2, k);
  };

  /* ---------------------------------------------------------------- graph views */
  var canvas = document.getElementById("canvas");
  var current = null;
  var marked = null;
  var selected = null;

  function viewHas(id, i) {
    if (id === "overview") return scopeOf[i] >= 0 || !!document.getElementById("tpl-overview");
    var m = members.get(id);
    return !!m && m.has(i);
  }
  function nodeEl(i) {
    if (!current) return null;
    return document.getElementById(current.id + "_n" + i) ||
      (current.id === "overview" && scopeOf[i] >= 0 ? document.getElementById(P.scopes[scopeOf[i]].box) : null);
  }
  function setScopeTab(id) {
    var holder = document.getElementById("scope-tab");
    holder.replaceChildren();
    if (!id || id.indexOf("scope") !== 0) return;
    var b = el("button", "tab active", "scope: " + clip(views.get(id).title, 48));
    b.title = views.get(id).title;
    b.dataset.view = id;
    holder.append(b);
  }
  function showView(id, focusIdx) {
    var tpl = document.getElementById("tpl-" + id);
    if (!tpl || !canvas) return false;
    canvas.replaceChildren(tpl.content.cloneNode(true));
    var svg = canvas.querySelector("svg");
    current = { id: id, svg: svg, pz: new PanZoom(svg, canvas) };
    canvas.dataset.view = id;
    marked = null;
    document.querySelectorAll(".tabs > .tab").forEach(function (t) { t.classList.toggle("active", t.dataset.view === id); });
    setScopeTab(id);
    fitCanvas();
    // A view opens fitted, whole and centred; only a search or a click on an op zooms in on it.
    var g = focusIdx !== undefined ? nodeEl(focusIdx) : null;
    if (g && current.pz.fitScale() < 0.6) current.pz.focusOn(g);
    if (selected !== null && nodeEl(selected)) mark(nodeEl(selected));
    return true;
  }
  /* The canvas as tall as the fitted view needs (within the CSS bounds), so a wide, short
     neighbourhood is not drawn in the middle of a mostly blank box. */
  function fitCanvas() {
    var b = current.pz.base, w = canvas.clientWidth || 800;
    var most = Math.max(320, window.innerHeight * 0.72);
    var k = Math.min(w / b.w, most / b.h, FIT_MAX);
    canvas.style.height = Math.round(Math.max(260, Math.min(most, b.h * k / 0.97 + 4))) + "px";
    current.pz.fit();
  }
  function mark(g) {
    if (marked) marked.classList.remove("hl");
    marked = g;
    if (g) { g.classList.remove("hl"); void g.getBBox(); g.classList.add("hl"); }
  }
  function locate(i, scroll) {
    if (!canvas) return;
    var order = [];
    if (current) order.push(current.id);
    order.push("full", "near");
    if (scopeOf[i] >= 0 && P.scopes[scopeOf[i]].view) order.push(P.scopes[scopeOf[i]].view);
    order.push("overview");
    for (var k = 0; k < order.length; k++) {
      var id = order[k];
      if (!document.getElementById("tpl-" + id) || !viewHas(id, i)) continue;
      if (!current || current.id !== id) showView(id, i);
      var g = nodeEl(i);
      if (!g) continue;
      current.pz.focusOn(g);
      mark(g);
      break;
    }
    if (scroll) document.getElementById("graph").scrollIntoView({ behavior: "smooth", block: "start" });
  }
  function targetOf(node) {
    var g = node && node.closest ? node.closest("g.node") : null;
    if (!g || !g.id) return null;
    var m = /_n(\d+)$/.exec(g.id);
    if (m) return { op: +m[1] };
    if (scopeByBox.has(g.id)) return { scope: scopeByBox.get(g.id) };
    return null;
  }

  if (canvas) {
    var drag = null, suppress = false;
    canvas.addEventListener("wheel", function (e) {
      if (!current) return;
      e.preventDefault();
      var p = current.pz.toSvg(e.clientX, e.clientY);
      current.pz.zoom(Math.exp(-e.deltaY * 0.0015), p.x, p.y);
    }, { passive: false });
    canvas.addEventListener("pointerdown", function (e) {
      if (!current || e.button !== 0) return;
      drag = { x: e.clientX, y: e.clientY, v: Object.assign({}, current.pz.v), moved: false, id: e.pointerId };
    });
    canvas.addEventListener("pointermove", function (e) {
      if (!drag) { hover(e); return; }
      var dx = e.clientX - drag.x, dy = e.clientY - drag.y;
      if (!drag.moved && Math.abs(dx) + Math.abs(dy) < 5) return;
      if (!drag.moved) { drag.moved = true; canvas.classList.add("dragging"); canvas.setPointerCapture(drag.id); tip.hidden = true; }
      var k = current.pz.scale();
      current.pz.v = { x: drag.v.x - dx / k, y: drag.v.y - dy / k, w: drag.v.w, h: drag.v.h };
      current.pz.apply();
    });
    var endDrag = function () {
      if (!drag) return;
      suppress = drag.moved;
      drag = null;
      canvas.classList.remove("dragging");
    };
    canvas.addEventListener("pointerup", endDrag);
    canvas.addEventListener("pointercancel", endDrag);
    canvas.addEventListener("pointerleave", function () { tip.hidden = true; });
    canvas.addEventListener("click", function (e) {
      if (suppress) { suppress = false; return; }
      var t = targetOf(e.target);
      if (t && t.op !== undefined) select(t.op, { locate: false });
      else if (t && t.scope !== undefined) openScope(t.scope);
    });
    canvas.addEventListener("keydown", function (e) {
      if (!current) return;
      var c = current.pz.centre();
      if (e.key === "+" || e.key === "=") current.pz.zoom(1.25, c.x, c.y);
      else if (e.key === "-") current.pz.zoom(0.8, c.x, c.y);
      else if (e.key === "0") current.pz.fit();
    });
    document.getElementById("zoom-in").addEventListener("click", function () { if (current) { var c = current.pz.centre(); current.pz.zoom(1.25, c.x, c.y); } });
    document.getElementById("zoom-out").addEventListener("click", function () { if (current) { var c = current.pz.centre(); current.pz.zoom(0.8, c.x, c.y); } });
    document.getElementById("zoom-fit").addEventListener("click", function () { if (current) current.pz.fit(); });
    document.querySelector("#graph .section-head").addEventListener("click", function (e) {
      var t = e.target.closest(".tab");
      if (t && t.dataset.view && (!current || current.id !== t.dataset.view)) showView(t.dataset.view);
    });
    window.addEventListener("resize", function () {
      if (!current) return;
      var c = current.pz.centre(), k = current.pz.scale();
      current.pz.setView(c.x, c.y, k);
    });
  }

  /* ---------------------------------------------------------------- tooltip */
  var tip = document.getElementById("tip");
  function placeTip(e, text) {
    tip.textContent = text;
    tip.hidden = false;
    var x = Math.min(e.clientX + 14, window.innerWidth - tip.offsetWidth - 8);
    tip.style.left = x + "px";
    tip.style.top = (e.clientY + 16) + "px";
  }
  function opSummary(i) {
    var n = nodes[i];
    var line = (n.op || "?") + " · " + (P.labels[statusOf(i)] || statusOf(i));
    if (n.max_rel !== null && n.max_rel !== undefined) line += " · max rel " + fmt(n.max_rel);
    return clip(names[i], 300) + "\n" + line;
  }
  function hover(e) {
    var t = targetOf(e.target);
    if (!t) { tip.hidden = true; return; }
    if (t.op !== undefined) { placeTip(e, opSummary(t.op)); return; }
    var s = P.scopes[t.scope];
    var parts = ORDER.filter(function (k) { return s.counts[k]; }).map(function (k) { return s.counts[k] + " " + P.labels[k]; });
    placeTip(e, clip(s.key, 300) + "\n" + s.members.length + " ops: " + parts.join(", ") + "\nclick for its ops");
  }

  /* ---------------------------------------------------------------- details drawer */
  var drawer = document.getElementById("details");
  var body = document.getElementById("details-body");
  function section(title) { body.append(el("h4", null, title)); }
  function kv(pairs) {
    var box = el("div", "kv");
    pairs.forEach(function (p) {
      if (p[1] === undefined) return;
      box.append(el("span", null, p[0]));
      var v = p[1] instanceof Node ? p[1] : el("span", null, p[1] === null ? "—" : p[1]);
      if (p[1] instanceof Node) { var w = el("span"); w.append(v); v = w; }
      box.append(v);
    });
    body.append(box);
  }
  function metricGrid(pairs) {
    var g = el("div", "mgrid");
    pairs.forEach(function (p) {
      var d = el("div");
      d.append(el("span", null, p[0]), el("b", null, p[1]));
      g.append(d);
    });
    body.append(g);
  }
  function histogram(h) {
    if (!h || !Array.isArray(h.counts) || !Array.isArray(h.log10_edges)) return null;
    var bars = [["0", +(num(h.zero) || 0)]];
    h.counts.forEach(function (c, k) { bars.push(["1e" + h.log10_edges[k], +(num(c) || 0)]); });
    var W = 460, H = 110, L = 4, B = 18, T = 6, bw = (W - 2 * L) / bars.length;
    var peak = Math.max.apply(null, bars.map(function (b) { return b[1]; })) || 1;
    var svg = document.createElementNS(SVGNS, "svg");
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    svg.setAttribute("class", "hist");
    bars.forEach(function (b, k) {
      var h2 = (H - T - B) * b[1] / peak, x = L + k * bw;
      var r = document.createElementNS(SVGNS, "rect");
      r.setAttribute("class", k === 0 ? "bar zero" : "bar");
      r.setAttribute("x", (x + 1).toFixed(1)); r.setAttribute("width", (bw - 2).toFixed(1));
      r.setAttribute("y", (H - B - h2).toFixed(1)); r.setAttribute("height", h2.toFixed(1));
      var t = document.createElementNS(SVGNS, "title");
      t.textContent = (k === 0 ? "exactly 0" : b[0] + " ≤ |a−b| < 1e" + h.log10_edges[k]) + ": " + b[1];
      r.append(t); svg.append(r);
      if (k === 0 || (k > 1 && +h.log10_edges[k - 1] % 3 === 0)) {
        var tx = document.createElementNS(SVGNS, "text");
        tx.setAttribute("x", (x + bw / 2).toFixed(1)); tx.setAttribute("y", String(H - 5));
        tx.setAttribute("text-anchor", "middle"); tx.setAttribute("class", "tick");
        tx.setAttribute("font-size", "10"); tx.setAttribute("fill", "#656d76");
        tx.textContent = b[0];
        svg.append(tx);
      }
    });
    return svg;
  }
  function valueText(v) {
    if (v === undefined) return "—";
    if (typeof v === "string") return v;
    return JSON.stringify(v);
  }
  function opList(list, limit) {
    var ul = el("ul", "ops");
    list.slice(0, limit).forEach(function (i) {
      var li = el("li");
      li.append(chip(statusOf(i)), opLink(i, clip(names[i], 120)), el("span", "num", "rel " + fmt(nodes[i].max_rel)));
      ul.append(li);
    });
    if (list.length > limit) ul.append(el("li", "muted", "… " + (list.length - limit) + " more"));
    return ul;
  }
  function openDrawer() {
    drawer.hidden = false;
    drawer.scrollTop = 0;
  }
  function openDetails(i) {
    var n = nodes[i], name = names[i];
    body.replaceChildren();
    body.append(el("h2", null, clip(shortName(name), 200)), breakable("div", "fullname", name));
    var row = el("div", "row");
    row.append(chip(statusOf(i)), el("span", "optype", n.op || "?"));
    if (n.rewrite) row.append(chip("rewritten", "rewrite: " + n.rewrite));
    body.append(row);
    var actions = el("div", "actions");
    var loc = el("button", null, "Locate in graph");
    loc.addEventListener("click", function () { locate(i, true); });
    var filt = el("button", null, "Show in table");
    filt.addEventListener("click", function () { tableShow(i); });
    actions.append(loc, filt);
    body.append(actions);
    if (n.reason) body.append(prose("div", "reason", n.reason));
    if (n.max_abs !== undefined && n.max_abs !== null || n.cosine !== undefined && n.cosine !== null) {
      section("Metrics");
      metricGrid([["max abs", fmt(n.max_abs)], ["max rel", fmt(n.max_rel)], ["mean abs", fmt(n.mean_abs)],
        ["ULP max", fmt(n.ulp_max)], ["cosine", fmt(n.cosine, 7)], ["SQNR dB", fmt(n.sqnr_db)],
        ["rel L2", fmt(n.rel_l2)], ["amplif.", fmt(n.amplification)]]);
      if (n.mismatch_count !== undefined && n.mismatch_count !== null) {
        kv([["elements differing", fmt(n.mismatch_count)], ["NaN / Inf mismatches", fmt(n.nan_mismatch) + " / " + fmt(n.inf_mismatch)]]);
      }
    }
    var listed = n.detection_list;
    if (listed && listed.measured === "matched_detections") {
      // a tensor holding a detector's lists: its metrics above are between matched detections
      section("Lists of detections (judged between matched detections)");
      var byIndex = n.index_by_index || {};
      kv([["rows of", listed.output ? String(listed.output) : "—"], ["matched detections", fmt(listed.matched_rows)],
        ["appeared, disappeared or changed class", fmt(listed.changes)],
        ["read index by index (row k of A vs row k of B)", "max abs " + fmt(byIndex.max_abs) + " · max rel " + fmt(byIndex.max_rel)]]);
    } else if (listed) {
      section("Lists of detections (judged index by index)");
      kv([["rows of", listed.output ? String(listed.output) : "—"], ["why", listed.why ? String(listed.why) : "—"]]);
    }
    var h = histogram(n.diff_histogram);
    if (h) { section("|a − b| per decade"); body.append(h); }
    section("Tensor");
    var dtypes = el("span", n.dtype_b && n.dtype && n.dtype_b !== n.dtype ? "warn-text" : null,
      (n.dtype || "—") + (n.dtype_b && n.dtype_b !== n.dtype ? "  vs B " + n.dtype_b : ""));
    kv([["A tensor", n.tensor || "—"], ["B tensor", n.b_tensor || "—"], ["shape", n.shape ? "[" + n.shape.join(", ") + "]" : "—"],
      ["dtype", dtypes], ["device", n.device || "—"], ["# (flow order)", String(flowStep[i])]]);  // the ops table's "#", the growth plot's x
    if (scopeOf[i] >= 0) {
      var sb = el("button", "linkish", P.scopes[scopeOf[i]].key);
      sb.addEventListener("click", function () { openScope(scopeOf[i]); });
      kv([["scope box", sb]]);
    } else if (n.scope) kv([["scope", n.scope]]);
    section("Alignment with B");
    kv([["B op", n.b_node || "—"], ["B op type", n.b_op || "—"], ["aligned by", n.alignment || "—"], ["rewrite", n.rewrite || "none"]]);
    if (n.isolation) {
      section("Isolation (op replayed alone on A's inputs)");
      var iso = n.isolation;
      // the replay of a loop's result (an Exit, a TensorArray reader) ran the whole loop: name it
      var loop = (P.loop_results || {})[i];
      var replayed = loop ? "the while loop " + loop + " (replayed whole)"
        : iso.loop ? "the op with the while loop above it" : "the op alone";
      var words = (P.isolation_words || {})[iso.verdict];
      var verdict = words ? words.replace("{replayed}", replayed) : String(iso.verdict);
      kv([["verdict", verdict], ["max abs", fmt(iso.max_abs)], ["max rel", fmt(iso.max_rel)], ["detail", iso.detail ? prose("span", null, iso.detail) : "—"]]);
      if (iso.command) body.append(el("pre", "cmd small", iso.command));
    }
    if (Array.isArray(n.worst) && n.worst.length) {
      section("Worst elements");
      var t = el("table", "data");
      var hr = el("tr");
      ["index", "A", "B", "|a − b|"].forEach(function (c, k) { hr.append(el("th", k ? "num" : null, c)); });
      t.append(hr);
      n.worst.slice(0, 20).forEach(function (w) {
        var tr = el("tr"), a = num(w[1]), b = num(w[2]);
        tr.append(el("td", "mono", "[" + (Array.isArray(w[0]) ? w[0].join(", ") : w[0]) + "]"),
          el("td", "num", fmt(w[1], 7)), el("td", "num", fmt(w[2], 7)),
          el("td", "num", a === null || b === null ? "—" : fmt(Math.abs(a - b))));
        t.append(tr);
      });
      body.append(t);
    }
    var ins = (n.inputs || []).map(function (x) { return pos.has(x) ? pos.get(x) : x; });
    section("Inputs (" + ins.length + ")");
    var known = ins.filter(function (x) { return typeof x === "number"; });
    if (known.length) body.append(opList(known, 60));
    ins.filter(function (x) { return typeof x !== "number"; }).forEach(function (x) { body.append(el("div", "mono muted", x + " (not in the report)")); });
    if (!ins.length) body.append(el("div", "muted", "none"));
    section("Feeds (" + succ[i].length + ")");
    body.append(succ[i].length ? opList(succ[i], 40) : el("div", "muted", "no compared consumer"));
    attrTable(n.attrs_a, n.attrs_b);
    var extra = Object.keys(n).filter(function (k) { return SHOWN.indexOf(k) < 0; });
    if (extra.length) {
      section("Other fields");
      kv(extra.map(function (k) { return [k, clip(valueText(n[k]), 600)]; }));
    }
    openDrawer();
  }
  // Every NODE field drawn above; anything newer in the report still shows under "Other fields".
  var SHOWN = ["status", "op", "scope", "device", "topo_index", "b_node", "b_op", "alignment", "tensor", "b_tensor",
    "shape", "dtype", "dtype_b", "max_abs", "max_rel", "mean_abs", "ulp_max", "cosine", "sqnr_db", "rel_l2",
    "amplification", "mismatch_count", "nan_mismatch", "inf_mismatch", "worst", "diff_histogram", "inputs",
    "reason", "rewrite", "isolation", "attrs_a", "attrs_b", "detection_list", "index_by_index"];
  function attrTable(a, b) {
    if (!a && !b) return;
    a = a || {};
    var keys = Array.from(new Set(Object.keys(a).concat(Object.keys(b || {})))).sort();
    var diff = 0, t = el("table", "data"), hr = el("tr");
    hr.append(el("th", null, "attr"), el("th", null, "A"), el("th", null, "B"));
    t.append(hr);
    keys.forEach(function (k) {
      var va = valueText(a[k]), vb = b ? valueText(b[k]) : "(no B op)";
      var tr = el("tr", b && va !== vb ? "differs" : null);
      if (b && va !== vb) diff++;
      tr.append(el("td", "mono", k), el("td", "mono", clip(va, 400)), el("td", "mono", clip(vb, 400)));
      t.append(tr);
    });
    section("Attributes, A vs B (" + keys.length + (diff ? ", " + diff + " differ" : "") + ")");
    body.append(t);
  }
  function openScope(k) {
    var s = P.scopes[k];
    body.replaceChildren();
    body.append(el("h2", null, clip(shortName(s.key), 200)), breakable("div", "fullname", s.key));
    var row = el("div", "row");
    row.append(chip(s.worst, "worst: " + (P.labels[s.worst] || s.worst)), el("span", "muted", s.members.length + " ops · max rel " + fmt(s.max_rel)));
    body.append(row);
    var counts = el("div", "row");
    ORDER.forEach(function (st) { if (s.counts[st]) counts.append(chip(st, s.counts[st] + " " + P.labels[st])); });
    body.append(counts);
    var actions = el("div", "actions");
    if (s.view && document.getElementById("tpl-" + s.view)) {
      var g = el("button", null, "Open its op graph");
      g.addEventListener("click", function () { showView(s.view); document.getElementById("graph").scrollIntoView({ behavior: "smooth" }); });
      actions.append(g);
    }
    var f = el("button", null, "Filter the table to it");
    f.addEventListener("click", function () { filterInput.value = "scope:" + s.key; statusSelect.value = ""; applyFilter(); document.getElementById("ops").scrollIntoView({ behavior: "smooth" }); });
    actions.append(f);
    body.append(actions);
    if (!s.view) body.append(el("div", "muted small", "Too large to draw op by op here; its ops are listed below and in the table."));
    section("Ops, worst first");
    var list = s.members.slice().sort(function (a, b) { return rank(statusOf(a)) - rank(statusOf(b)) || a - b; });
    body.append(opList(list, 400));
    openDrawer();
  }
  function select(i, opts) {
    selected = i;
    openDetails(i);  // first: centring leaves room for the drawer
    if (opts && opts.locate) locate(i, false);
    else if (current && nodeEl(i)) mark(nodeEl(i));
    highlightRow(i);
  }
  document.getElementById("details-close").addEventListener("click", function () { drawer.hidden = true; });
  document.addEventListener("keydown", function (e) { if (e.key === "Escape") { drawer.hidden = true; results.hidden = true; } });

  /* ---------------------------------------------------------------- search */
  var search = document.getElementById("search");
  var results = document.getElementById("search-results");
  var lower = names.map(function (n) { return n.toLowerCase(); });
  var hits = [], active = 0;
  function find(q) {
    q = q.trim().toLowerCase();
    if (!q) return [];
    var out = [];
    for (var i = 0; i < lower.length; i++) {
      var p = lower[i].indexOf(q);
      if (p < 0) continue;
      var sn = shortName(lower[i]);
      var score = lower[i] === q ? 0 : sn === q ? 1 : sn.indexOf(q) === 0 ? 2 : p === 0 ? 3 : 4;
      out.push([score, lower[i].length, i]);
    }
    out.sort(function (a, b) { return a[0] - b[0] || a[1] - b[1] || a[2] - b[2]; });
    return out.slice(0, 30).map(function (x) { return x[2]; });
  }
  function renderHits() {
    results.replaceChildren();
    hits.forEach(function (i, k) {
      var li = el("li", k === active ? "active" : null);
      li.append(chip(statusOf(i)), el("span", "short", clip(shortName(names[i]), 60)), el("span", "full", clip(names[i], 200)));
      li.title = names[i];
      li.addEventListener("mousedown", function (e) { e.preventDefault(); choose(i); });
      results.append(li);
    });
    if (!hits.length && search.value.trim()) results.append(el("li", "muted", "no op name contains this"));
    show(results, !search.value.trim());
  }
  function choose(i) {
    results.hidden = true;
    search.blur();
    select(i, { locate: true });
  }
  search.addEventListener("input", function () { hits = find(search.value); active = 0; renderHits(); });
  search.addEventListener("keydown", function (e) {
    if (e.key === "ArrowDown") { active = Math.min(active + 1, hits.length - 1); renderHits(); e.preventDefault(); }
    else if (e.key === "ArrowUp") { active = Math.max(active - 1, 0); renderHits(); e.preventDefault(); }
    else if (e.key === "Enter" && hits.length) { choose(hits[active]); e.preventDefault(); }
  });
  search.addEventListener("blur", function () { setTimeout(function () { results.hidden = true; }, 150); });
  search.addEventListener("focus", function () { if (search.value.trim()) renderHits(); });

  /* ---------------------------------------------------------------- ops table */
  var tbody = document.querySelector("#op-table tbody");
  var filterInput = document.getElementById("op-filter");
  var statusSelect = document.getElementById("status-filter");
  var more = document.getElementById("op-more");
  var count = document.getElementById("op-count");
  var NUMERIC = ["max_abs", "max_rel", "ulp_max", "cosine", "amplification"];
  /* The table opens on what the reader came for: the first divergence, then the ops beyond
     tolerance, then those within it, then the rest, each in the order the examples meet the ops
     (P.flow_order), never the report's topological order, which starts with every weight by name. */
  var flowStep = new Array(names.length);
  (P.flow_order || names.map(function (_, i) { return i; })).forEach(function (i, k) { flowStep[i] = k; });
  var firstOps = new Set(P.first || []);
  function standing(i) {
    var st = statusOf(i);
    return firstOps.has(i) ? 0 : st === "origin" || st === "propagated" ? 1 : st === "within_tolerance" ? 2 : 3;
  }
  var rows = names.map(function (name, i) {
    var r = { i: i, step: flowStep[i], standing: standing(i), name: name, lname: lower[i], op: nodes[i].op || "",
      status: statusOf(i), scope: nodes[i].scope || "" };
    NUMERIC.forEach(function (k) { r[k] = num(nodes[i][k]); });
    return r;
  });
  var DEFAULT_SORT = "standing";
  var sortKey = DEFAULT_SORT, sortDir = 1, shown = 0, filtered = rows, PAGE = 250;
  function compare(a, b) {
    var x = a[sortKey], y = b[sortKey], tie = a.step - b.step;
    if (sortKey === "status") return (rank(x) - rank(y)) * sortDir || tie;
    if (typeof x === "string" || typeof y === "string") return String(x).localeCompare(String(y)) * sortDir || tie;
    if (x === null || y === null) return (x === null) - (y === null) || tie;
    var nx = Number.isNaN(x) ? Infinity : x, ny = Number.isNaN(y) ? Infinity : y;
    return ((nx > ny) - (nx < ny)) * sortDir || tie;
  }
  function applyFilter() {
    var q = filterInput.value.trim().toLowerCase(), st = statusSelect.value;
    var scope = q.indexOf("scope:") === 0 ? q.slice(6) : null;
    filtered = rows.filter(function (r) {
      if (st && (st === "!identical" ? r.status === "identical" : r.status !== st)) return false;
      if (scope !== null) return scopeOf[r.i] >= 0 && P.scopes[scopeOf[r.i]].key.toLowerCase() === scope;
      return !q || r.lname.indexOf(q) >= 0 || r.op.toLowerCase().indexOf(q) >= 0;
    });
    filtered.sort(compare);
    shown = 0;
    tbody.replaceChildren();
    renderMore();
  }
  function rowEl(r) {
    var tr = el("tr");
    tr.dataset.row = String(r.i);
    if (r.i === selected) tr.className = "selected";
    var name = breakable("td", "mono", clip(r.name, 140));
    name.title = r.name;
    var st = el("td");
    st.append(chip(r.status));
    tr.append(el("td", "num", String(r.step)), name, el("td", null, r.op), st,
      el("td", "num", fmt(nodes[r.i].max_abs)), el("td", "num", fmt(nodes[r.i].max_rel)), el("td", "num", fmt(nodes[r.i].ulp_max)),
      el("td", "num", fmt(nodes[r.i].cosine, 7)), el("td", "num", fmt(nodes[r.i].amplification)));
    return tr;
  }
  function renderMore() {
    var frag = document.createDocumentFragment();
    filtered.slice(shown, shown + PAGE).forEach(function (r) { frag.append(rowEl(r)); });
    tbody.append(frag);
    shown = Math.min(filtered.length, shown + PAGE);
    count.textContent = filtered.length + " of " + rows.length + " ops" + (shown < filtered.length ? " (showing " + shown + ")" : "");
    more.textContent = "Show " + Math.min(PAGE, filtered.length - shown) + " more";
    show(more, shown >= filtered.length);
  }
  function highlightRow(i) {
    tbody.querySelectorAll("tr.selected").forEach(function (tr) { tr.classList.remove("selected"); });
    var tr = tbody.querySelector('tr[data-row="' + i + '"]');
    if (tr) tr.classList.add("selected");
  }
  function tableShow(i) {
    filterInput.value = "";
    statusSelect.value = "";
    sortKey = DEFAULT_SORT; sortDir = 1;
    document.querySelectorAll("#op-table th").forEach(function (h) { h.classList.remove("asc", "desc"); });
    applyFilter();
    var at = filtered.findIndex(function (r) { return r.i === i; });
    while (shown <= at && shown < filtered.length) renderMore();
    highlightRow(i);
    var tr = tbody.querySelector('tr[data-row="' + i + '"]');
    if (tr) tr.scrollIntoView({ behavior: "smooth", block: "center" });
  }
  filterInput.addEventListener("input", applyFilter);
  statusSelect.addEventListener("change", applyFilter);
  more.addEventListener("click", renderMore);
  tbody.addEventListener("click", function (e) {
    var tr = e.target.closest("tr");
    if (tr && tr.dataset.row) select(+tr.dataset.row, { locate: true });
  });
  document.querySelectorAll("#op-table th").forEach(function (th) {
    th.addEventListener("click", function () {
      var key = th.dataset.key;
      if (sortKey === key) sortDir = -sortDir;
      else { sortKey = key; sortDir = NUMERIC.indexOf(key) >= 0 && key !== "cosine" ? -1 : 1; }
      document.querySelectorAll("#op-table th").forEach(function (h) { h.classList.remove("asc", "desc"); });
      th.classList.add(sortDir > 0 ? "asc" : "desc");
      applyFilter();
    });
  });

  /* ---------------------------------------------------------------- growth plot, links, misc */
  var plot = document.getElementById("growth-plot");
  var flowOrder = P.flow_order || names.map(function (_, i) { return i; });
  function plotStep(e) {  // the plot's x is the ops table's "#": the order the examples meet the ops
    var r = plot.getBoundingClientRect(), vb = plot.viewBox.baseVal;
    var x = (e.clientX - r.left) * vb.width / r.width;
    var left = +plot.dataset.left, width = +plot.dataset.width, n = +plot.dataset.count;
    var k = Math.round((x - left) / width * (n - 1));
    return k < 0 || k >= n ? null : k;
  }
  function plotIndex(e) { var k = plotStep(e); return k === null ? null : flowOrder[k]; }
  if (plot && names.length) {
    var cursor = plot.querySelector(".cursor");
    plot.addEventListener("mousemove", function (e) {
      var k = plotStep(e);
      if (k === null) { tip.hidden = true; return; }
      var x = +plot.dataset.left + (names.length > 1 ? +plot.dataset.width * k / (names.length - 1) : 0);
      cursor.setAttribute("x1", x); cursor.setAttribute("x2", x);
      placeTip(e, "#" + k + " " + opSummary(flowOrder[k]));
    });
    plot.addEventListener("mouseleave", function () { tip.hidden = true; });
    plot.addEventListener("click", function (e) {
      var m = e.target.closest(".origin-mark");
      var i = m ? +m.dataset.idx : plotIndex(e);
      if (i !== null) select(i, { locate: true });
    });
  }
  document.addEventListener("click", function (e) {
    var t = e.target.closest("[data-idx]");
    if (!t || t.closest("#growth-plot")) return;
    select(+t.dataset.idx, { locate: true });
  });
  var envOnly = document.getElementById("env-only-diff");
  if (envOnly) envOnly.addEventListener("change", function () {
    document.getElementById("env-table").classList.toggle("only-diff", envOnly.checked);
  });
  var copy = document.getElementById("copy-command");
  copy.addEventListener("click", function () {
    var text = document.getElementById("command").textContent;
    var done = function () { copy.textContent = "copied"; setTimeout(function () { copy.textContent = "copy"; }, 1500); };
    var fallback = function () {
      var range = document.createRange();
      range.selectNodeContents(document.getElementById("command"));
      var sel = window.getSelection();
      sel.removeAllRanges(); sel.addRange(range);
      copy.textContent = "press Ctrl+C";
    };
    if (navigator.clipboard && navigator.clipboard.writeText) navigator.clipboard.writeText(text).then(done, fallback);
    else fallback();
  });

  /* ---------------------------------------------------------------- first paint */
  // Server-written code spans (names in sentences) get the same break opportunities as the
  // script's names, in the DOM only: report.html keeps the report's words verbatim.
  document.querySelectorAll("main code").forEach(function (c) {
    if (!c.childElementCount && /[\/_]/.test(c.textContent)) c.replaceChildren.apply(c, Array.from(breakable("span", null, c.textContent).childNodes));
  });
  applyFilter();
  var first = ["near", "full", "overview"].filter(function (id) { return document.getElementById("tpl-" + id); })[0];
  if (first) showView(first);
  window.tftraceRenderMs = performance.now() - started;
  document.documentElement.dataset.ready = "1";
})();

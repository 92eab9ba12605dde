"""The readers under attack: hand-made manifests and report.json files, then fuzzing (hypothesis).

Captures and reports travel (CI artifacts, issue attachments), so everything tftrace reads back
is hostile until checked. The captures here are *synthetic but complete* (:func:`synthetic`): a
four-op graph written with the real :class:`CaptureWriter` and a manifest with every field the
worker writes, so ``tftrace compare A B`` runs on them end to end without TensorFlow, in under
a second. Each hand-made attack must end in exit 2 and one line that names what is wrong, and
write no report; each fuzzed input must give a :class:`TftraceError` or a result, never another
exception. Artifact detection is fuzzed too (it needs TensorFlow's file layer: slow).
"""

from __future__ import annotations

import copy
import io
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import assert_user_error
from tracer.artifacts.loader import ArtifactRef
from tracer.captures.reader import Capture
from tracer.captures.store import CaptureWriter
from tracer.cli import main
from tracer.errors import TftraceError
from tracer.runspec import Knobs, Side

# Bounded and reproducible in `make test` (RELIABILITY.md counts these); fuzz longer with
# TFTRACE_FUZZ_SCALE=50 TFTRACE_FUZZ_RANDOM=1.
EXAMPLES = {"capture": 120, "compare": 60, "report": 60, "artifacts": 60}
SCALE = int(os.environ.get("TFTRACE_FUZZ_SCALE", "1"))
FUZZ = settings(deadline=None, derandomize=not os.environ.get("TFTRACE_FUZZ_RANDOM"), database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
ROWS = 4
X = np.arange(16, dtype=np.float32).reshape(ROWS, 4) / 8


# --------------------------------------------------------------------------- synthetic captures


def _node(name: str, op: str, inputs: tuple[str, ...] = (), shape: list[int | None] | None = None) -> dict[str, Any]:
    return {"name": name, "op": op, "device": "", "scope": "", "attrs": {}, "inputs": list(inputs),
            "control_inputs": [], "outputs": [{"dtype": "float32", "shape": [None, 4] if shape is None else shape,
                                               "capturable": True, "reason": ""}]}


def synthetic(out: Path, scale: float, model: str, env: dict[str, str] | None = None,
              allow_unsafe_ops: bool = False, packed: bool = True) -> Path:
    """x -> Mul(x, scale) -> Identity -> y, four examples in one run, written as the worker would.

    ``model`` is the path the spec records (isolation replays it when it exists here);
    ``allow_unsafe_ops`` writes the flag an older tftrace recorded in the spec (never read back).
    """
    values = {"x:0": X, "scale:0": np.float32(scale), "mul:0": X * np.float32(scale), "y:0": X * np.float32(scale)}
    layout = {"x:0": "rows", "scale:0": "const", "mul:0": "rows", "y:0": "rows"}
    side = Side(ArtifactRef(model), knobs=Knobs(env=tuple(sorted((env or {}).items()))))
    with CaptureWriter(out, packed=packed) as writer:
        for name, value in values.items():
            if layout[name] == "rows":  # y is an Identity: stored once, as an alias of mul
                writer.write_rows(name, value, 0, ROWS, same_as="mul:0" if name == "y:0" else None)
            else:
                writer.write_whole(name, value)
        spec = {"name": "y:0", "dtype": "float32", "shape": [None, 4]}
        writer.finalize({
            "spec": {**side.to_json(), **({"allow_unsafe_ops": True} if allow_unsafe_ops else {})},
            "artifact": {"kind": "saved_model_v1", "location": model, "tf_version_written": "2.21.0",
                         "inlined_by_loader": False},
            "signature": {"key": "serving_default", "method_name": "", "from_user": False,
                          "inputs": {"x": {**spec, "name": "x:0"}}, "outputs": {"y": spec}},
            "graph": {"inputs": {"x": "x:0"}, "outputs": {"y": "y:0"},
                      "nodes": [_node("x", "Placeholder"), _node("scale", "Const", shape=[]),
                                _node("mul", "Mul", ("x:0", "scale:0")), _node("y", "Identity", ("mul:0",))]},
            "examples": {"count": ROWS, "source": "synthetic", "batch_major": True},
            "batch_size": ROWS, "runs": [[0, ROWS]], "tensor_layout": layout, "fetch_chunks": 1, "session_config": "",
            "observer_effect": {"stateful_ops": [], "explained_by_state": False, "outputs_identical": True,
                                "outputs_max_abs_diff": {"y": 0.0}, "executed_ops": {"plain": {}, "instrumented": {}},
                                "only_in_plain": [], "only_in_instrumented": []},
            "timings": {"load_s": 0.1, "plain_latency_ms": {"median": 1.0, "min": 1.0, "max": 1.0, "runs": 1,
                                                           "batch_rows": ROWS}, "instrumented_s": 0.1, "total_s": 0.2},
            "environment": {"tensorflow": "2.21.0"},
            "notes": [],
        })
    return out


def cli(*args: str) -> subprocess.CompletedProcess:
    """``tftrace ARGS`` in this process (the TF-free commands start in milliseconds this way)."""
    out, err = io.StringIO(), io.StringIO()
    previous = signal.getsignal(signal.SIGTERM)  # main() installs its own handler
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "200"  # as conftest.run_cli: tables are not wrapped at 80 columns
    try:
        with redirect_stdout(out), redirect_stderr(err):
            code = main(list(args))
    finally:
        signal.signal(signal.SIGTERM, previous)
        if columns is None:
            os.environ.pop("COLUMNS")
        else:
            os.environ["COLUMNS"] = columns
    return subprocess.CompletedProcess(["tftrace", *args], code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Captures A and B (B's constant differs by 1e-3) and the report comparing them."""
    root = tmp_path_factory.mktemp("pair")
    a = synthetic(root / "a", 2.0, "/nonexistent/model_a")
    b = synthetic(root / "b", 2.001, "/nonexistent/model_b")
    done = cli("compare", str(a), str(b), "--out", str(root / "report"))
    assert done.returncode == 1, done.stderr
    return {"a": a, "b": b, "report": root / "report", "root": root}


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_synthetic_pair_compares_end_to_end(pair: dict[str, Path]) -> None:
    report = json.loads((pair["report"] / "report.json").read_text())
    assert report["verdict"] == "diverged" and report["first_divergence"]["node"] == "scale"
    assert report["outputs"]["y"]["max_abs"] == pytest.approx(float(np.max(X * np.float32(2.001) - X * np.float32(2))))


# --------------------------------------------------------------------------- hand-made manifests


def _tensor(name: str, change: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any], Path], None]:
    return lambda manifest, cap: change(manifest["tensors"][name])


def _outside_link_of(name: str) -> Callable[[dict[str, Any], Path], None]:
    def attack(manifest: dict[str, Any], cap: Path) -> None:
        np.save(cap.parent / "secret.npy", X)
        suffix = Path(manifest["tensors"][name]["file"]).suffix  # .zst: packed (format 2)
        (cap / "tensors" / f"link{suffix}").symlink_to(cap.parent / "secret.npy")
        manifest["tensors"][name]["file"] = f"tensors/link{suffix}"

    return attack


_outside_link = _outside_link_of("x:0")


def _tensors_dir_elsewhere(manifest: dict[str, Any], cap: Path) -> None:
    """``tensors/`` itself a link to a directory outside the capture that holds the same files."""
    shutil.move(str(cap / "tensors"), str(cap.parent / "elsewhere"))
    (cap / "tensors").symlink_to(cap.parent / "elsewhere")


def _cycle(manifest: dict[str, Any], cap: Path) -> None:
    manifest["graph"]["nodes"][2]["control_inputs"] = ["y"]  # mul waits for y, which reads mul


MANIFEST_ATTACKS: dict[str, tuple[Callable[[dict[str, Any], Path], None], str]] = {
    "file path with ..": (_tensor("x:0", lambda r: r.update(file="../../../../etc/passwd")),
                          "tensor 'x:0': file path '../../../../etc/passwd' contains '..' or a backslash"),
    "absolute file path": (_tensor("x:0", lambda r: r.update(file="/etc/passwd")),
                           "tensor 'x:0': file path '/etc/passwd' is absolute"),
    "symlink out of tensors/": (_outside_link, "tensors/link.zst resolves to "),
    "tensors/ a symlink out of the capture": (_tensors_dir_elsewhere, "elsewhere/"),
    "shape of 2**50 elements": (_tensor("x:0", lambda r: r.update(shape=[2**25, 2**25], size_bytes=2**52)),
                                "shape [33554432, 33554432] declares 4503599627370496 bytes, more than the "
                                "1099511627776-byte limit"),
    "size_bytes of the wrong type": (_tensor("x:0", lambda r: r.update(size_bytes="64")),
                                     "size_bytes '64' does not match shape [4, 4]"),
    "dtype of the wrong type": (_tensor("x:0", lambda r: r.update(dtype=5)), "tensor 'x:0': unknown dtype 5"),
    "shape of the wrong type": (_tensor("x:0", lambda r: r.update(shape="4x4")),
                                "shape '4x4' is not a list of at most 32 non-negative integers"),
    "tensors is a list": (lambda m, c: m.update(tensors=[]), '"tensors" is not a JSON object'),
    "graph nodes not a list": (lambda m, c: m["graph"].update(nodes="x"), '"graph.nodes" is not a list'),
    "graph node without its op": (lambda m, c: m["graph"]["nodes"][2].pop("op"), "the op graph: node 'mul' has no op type"),
    "graph with a cycle": (_cycle, "the op graph: it has a cycle"),
    "signature names a missing tensor": (lambda m, c: m["graph"]["outputs"].update(y="nowhere:0"),
                                         "signature output 'y' names 'nowhere:0', which is not a tensor of the graph"),
    "examples count not a number": (lambda m, c: m["examples"].update(count="four"),
                                    '"examples.count" is not an integer'),
    "negative examples count": (lambda m, c: m["examples"].update(count=-1),
                                '"examples" needs an integer "count" >= 0 and a boolean "batch_major"'),
    "examples file digest that is not a sha256": (lambda m, c: m["examples"].update(file_sha256="<b>x</b>"),
                                                  '"examples.file_sha256" is not 64 lowercase hexadecimal digits'),
    "examples shared by no input of the signature": (lambda m, c: m["examples"].update(shared=["<b>x</b>"]),
                                                     '"examples.shared" is not a list of the signature\'s input keys'),
    "observer effect of the wrong shape": (lambda m, c: m["observer_effect"].update(only_in_plain=5),
                                           '"observer_effect.only_in_plain" is not a list'),
    "stats that are not numbers": (_tensor("x:0", lambda r: r.update(stats={"min": "low"})),
                                   "tensor 'x:0': its stats are not an object of numbers"),
    "runs past the examples": (lambda m, c: m.update(runs=[[0, 99]]),
                               '"runs" is not a list of [start, stop] example ranges within "examples.count"'),
    "layout of an unknown kind": (lambda m, c: m["tensor_layout"].update({"x:0": "evil"}), '"tensor_layout" maps'),
    "graph missing": (lambda m, c: m.pop("graph"), "manifest.json has no 'graph' where tftrace needs it"),
    # y:0 (an Identity of mul:0) is stored once: its record says alias_of, and the reader checks the claim.
    "alias of a missing tensor": (_tensor("y:0", lambda r: r.update(alias_of="gone:0")),
                                  "tensor 'y:0': alias_of 'gone:0' does not name another captured tensor"),
    "alias of a tensor of another shape": (_tensor("y:0", lambda r: r.update(alias_of="scale:0")),
                                           "tensor 'y:0': alias_of 'scale:0' names a tensor of another shape "
                                           "([4, 4] here, [] there)"),
    "alias chain": (_tensor("x:0", lambda r: r.update(alias_of="y:0")), "tensor 'x:0': alias_of 'y:0' names an alias itself"),
    "alias through a symlink out of tensors/": (_outside_link_of("y:0"), "tensors/link.zst resolves to "),
    # the fuzzer's find (2026-12-02): a list of one object where the knob's pairs go escaped as a ValueError
    "a knob of the wrong shape": (lambda m, c: m["spec"]["knobs"].update(grappler=[m["spec"]["knobs"]["grappler"]]),
                                  '"spec.knobs" does not describe a side (ValueError: dictionary update sequence'),
    "a knob nobody knows": (lambda m, c: m["spec"]["knobs"].update(warp_drive="on"),
                            '"spec.knobs" does not describe a side (TypeError: '),
}
TEXT_ATTACKS: dict[str, tuple[Callable[[Path], None], str]] = {
    "NaN in the JSON": (lambda p: p.write_text(p.read_text()[:-1] + ', "x": NaN}'), "manifest.json is not valid JSON"),
    "nested 100,000 deep": (lambda p: p.write_text('{"x": ' + "[" * 100_000 + "]" * 100_000 + "}"),
                            "manifest.json is not valid JSON"),
    "a 1 GiB manifest": (lambda p: os.truncate(p, (1 << 30) + 1),
                         "manifest.json is 1,073,741,825 bytes, more than the 1,073,741,824-byte limit"),
    "not UTF-8": (lambda p: p.write_bytes(b"\xff\xfe{}"), "manifest.json is not valid JSON"),
}


def _refused(pair: dict[str, Path], cap: Path, out: Path, fragment: str) -> None:
    proc = cli("compare", str(cap), str(pair["b"]), "--out", str(out), "--isolate", "0")
    assert_user_error(proc, f"damaged capture at {cap}: ", fragment, "Re-run the capture with --force")
    assert not (out / "report.json").exists()


@pytest.mark.parametrize("attack", sorted(MANIFEST_ATTACKS))
def test_hand_made_manifest_is_refused_by_compare(attack: str, pair: dict[str, Path], tmp_path: Path) -> None:
    cap = _copy(pair["a"], tmp_path / "a")
    assert Capture.open(cap).alias_of("y:0") == "mul:0"  # as written (the alias attacks change it)
    change, fragment = MANIFEST_ATTACKS[attack]
    manifest = json.loads((cap / "manifest.json").read_text())
    change(manifest, cap)
    (cap / "manifest.json").write_text(json.dumps(manifest))
    _refused(pair, cap, tmp_path / "report", fragment)


@pytest.mark.parametrize("attack", sorted(TEXT_ATTACKS))
def test_malformed_manifest_text_is_refused_by_compare(attack: str, pair: dict[str, Path], tmp_path: Path) -> None:
    cap = _copy(pair["a"], tmp_path / "a")
    change, fragment = TEXT_ATTACKS[attack]
    change(cap / "manifest.json")
    _refused(pair, cap, tmp_path / "report", fragment)


def test_npy_header_claiming_2_40_elements_is_refused_before_mapping(pair: dict[str, Path], tmp_path: Path) -> None:
    cap = synthetic(tmp_path / "a", 2.0, "/nonexistent/model_a", packed=False)  # .npy files (format 1's, strings')
    path = cap / Capture.open(cap).record("x:0")["file"]
    header_len = len(path.read_bytes()) - X.nbytes
    huge = np.lib.format.header_data_from_array_1_0(X) | {"shape": (2**40,)}
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, huge)
    assert len(buffer.getvalue()) == header_len  # same length: the file still looks well formed
    path.write_bytes(buffer.getvalue() + X.tobytes())
    proc = cli("compare", str(cap), str(pair["b"]), "--out", str(tmp_path / "report"), "--isolate", "0")
    assert_user_error(proc, f"damaged capture at {cap}: ", "holds float32 (1099511627776,) in 64 bytes but the manifest "
                      "declares float32 (4, 4) in 64 bytes")
    assert not (tmp_path / "report" / "report.json").exists()


def test_isolation_does_not_take_code_loading_environment_from_a_capture(pair: dict[str, Path], tmp_path: Path) -> None:
    """A capture's spec names a model that exists here, and PYTHONPATH to a sitecustomize.py."""
    evil = tmp_path / "evil"
    evil.mkdir()
    marker = tmp_path / "pwned"
    (evil / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    model = tmp_path / "model"
    model.mkdir()
    cap = synthetic(tmp_path / "a", 2.0, str(model), env={"PYTHONPATH": str(evil), "TF_CPP_MIN_LOG_LEVEL": "3"})
    proc = cli("compare", str(cap), str(pair["b"]), "--out", str(tmp_path / "report"))
    assert_user_error(proc, "the side to replay asks for PYTHONPATH in the child's environment, as recorded in a capture "
                      "or report file", "export PYTHONPATH=...")
    assert not marker.exists()


# --------------------------------------------------------------------------- hand-made report.json


def _report_dir(pair: dict[str, Path], tmp_path: Path, change: Callable[[dict[str, Any]], Any]) -> Path:
    report = json.loads((pair["report"] / "report.json").read_text())
    change(report)
    out = tmp_path / "report"
    out.mkdir()
    (out / "report.json").write_text(json.dumps(report))
    return out


SAFE_REPORTS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "a 5 MB node name": lambda r: r["nodes"].update({"<script>" + "x" * 5_000_000: r["nodes"]["mul"]}),
    "a 10 MB command": lambda r: r.update(command="tftrace compare " + "<b>" * 3_000_000),
    "a node that is not an object": lambda r: r["nodes"].update(mul="oops"),
    "metrics that are strings": lambda r: [n.update(max_abs="big", max_rel=[1]) for n in r["nodes"].values()],
    "rewrites of the wrong shape": lambda r: r.update(rewrites=[{"kind": 1, "a_nodes": "x"}]),
    "edges of the wrong shape": lambda r: r.update(edges=[[1], "x", ["mul", "nowhere"]]),
}
# tracer/report/contract.py::load_report checks report.json against tracer/schemas/report.schema.json where it is
# read (was change request R2).
REFUSED_REPORTS: dict[str, tuple[Callable[[dict[str, Any]], Any], str]] = {
    "nodes is a list": (lambda r: r.update(nodes=[1, 2]), '"nodes"'),
    "verdict is a number": (lambda r: r.update(verdict=7), '"verdict"'),
    "first divergence is a string": (lambda r: r.update(first_divergence="x"), '"first_divergence"'),
    "sides missing": (lambda r: r.pop("sides"), '"sides"'),
    "origins is an object": (lambda r: r.update(origins={"a": 1}), '"origins"'),
    "outputs is a list": (lambda r: r.update(outputs=[1]), '"outputs"'),
    "only schema_version": (lambda r: [r.pop(k) for k in list(r) if k != "schema_version"], '"verdict"'),
}
REFUSED_REPORT_TEXTS: dict[str, tuple[Callable[[str], str], str]] = {
    "NaN in a metric": (lambda t: t[:-1] + ', "extra": NaN}', "is not valid JSON"),
    "nested 100,000 deep": (lambda t: t[:-1] + ', "extra": ' + "[" * 100_000 + "]" * 100_000 + "}", "is not valid JSON"),
}
@pytest.mark.parametrize("case", sorted(SAFE_REPORTS))
def test_hostile_report_json_renders_safely(case: str, pair: dict[str, Path], tmp_path: Path) -> None:
    out = _report_dir(pair, tmp_path, SAFE_REPORTS[case])
    proc = cli("report", str(out))
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    html = (out / "report.html").read_text(encoding="utf-8")
    assert html.count("<script") == 3 and "<b><b>" not in html


@pytest.mark.parametrize("case", sorted(REFUSED_REPORTS))
def test_hostile_report_json_is_refused_with_a_clear_message(case: str, pair: dict[str, Path], tmp_path: Path) -> None:
    change, fragment = REFUSED_REPORTS[case]
    _assert_report_refused(_report_dir(pair, tmp_path, change), fragment)


@pytest.mark.parametrize("case", sorted(REFUSED_REPORT_TEXTS))
def test_malformed_report_json_text_is_refused(case: str, pair: dict[str, Path], tmp_path: Path) -> None:
    change, fragment = REFUSED_REPORT_TEXTS[case]
    out = tmp_path / "report"
    out.mkdir()
    (out / "report.json").write_text(change((pair["report"] / "report.json").read_text()))
    _assert_report_refused(out, fragment)


def _assert_report_refused(out: Path, fragment: str) -> None:
    text = (out / "report.json").read_text()
    proc = cli("report", str(out))
    assert_user_error(proc, f"{out / 'report.json'} ", fragment)
    assert (out / "report.json").read_text() == text and not (out / "report.html").exists()  # left as it was


def test_terminal_summary_prints_names_as_text(pair: dict[str, Path], tmp_path: Path) -> None:
    """A signature key such as "[/oops]" (legal in a SavedModel) is text, not console markup."""
    out = _report_dir(pair, tmp_path, lambda r: r["outputs"].update({"[/oops]": r["outputs"]["y"],
                                                                     "[link=https://evil.example]x[/link]": r["outputs"]["y"]}))
    proc = cli("report", str(out))
    assert proc.returncode == 1 and "[/oops]" in proc.stdout and "[link=https://evil.example]x[/link]" in proc.stdout, proc.stderr


# --------------------------------------------------------------------------- fuzzing


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every location inside a JSON document (keys and list indices)."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield (*prefix, key)
            yield from _paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            yield (*prefix, i)
            yield from _paths(inner, (*prefix, i))


def _mutate(doc: Any, data: st.DataObject, rounds: int = 3) -> Any:
    """Replace, delete or retype a few random locations of a JSON document."""
    doc = copy.deepcopy(doc)
    for _ in range(data.draw(st.integers(1, rounds))):
        paths = list(_paths(doc))
        if not paths:
            break
        path = data.draw(st.sampled_from(paths))
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        how = data.draw(st.sampled_from(["replace", "delete", "wrap", "stringify"]))
        if how == "delete":
            del parent[path[-1]]
        elif how == "wrap":
            parent[path[-1]] = [parent[path[-1]]]
        elif how == "stringify":
            parent[path[-1]] = str(parent[path[-1]])
        else:
            parent[path[-1]] = data.draw(JSON)
    return doc


def _refused_as_a_user_error(exc: TftraceError, *where: str) -> None:
    """What a hostile or damaged input must get when it is refused: the problem, naming where it
    lies (one of ``where``), and the fix, on one printable line without Python's internals."""
    text = str(exc)
    assert exc.problem and exc.fix, text
    assert "Traceback" not in text and "\n" not in text, text
    assert any(w in text for w in where), (where, text)


@settings(FUZZ, max_examples=EXAMPLES["capture"] * SCALE)
@given(data=st.data())
def test_fuzz_capture_open_and_read(pair: dict[str, Path], tmp_path_factory: pytest.TempPathFactory,
                                    data: st.DataObject) -> None:
    cap = _copy(pair["a"], tmp_path_factory.mktemp("fuzz") / "a")
    manifest = json.loads((cap / "manifest.json").read_text())
    if data.draw(st.booleans()):
        (cap / "manifest.json").write_text(json.dumps(_mutate(manifest, data)))
    else:  # bytes: flip, cut or insert somewhere in the manifest or a tensor file
        target = data.draw(st.sampled_from([cap / "manifest.json", *sorted((cap / "tensors").iterdir())]))
        raw = bytearray(target.read_bytes())
        at = data.draw(st.integers(0, len(raw) - 1))
        how = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if how == "flip":
            raw[at] ^= data.draw(st.integers(1, 255))
        elif how == "cut":
            del raw[at:]
        else:
            raw[at:at] = data.draw(st.binary(min_size=1, max_size=8))
        target.write_bytes(bytes(raw))
    try:
        opened = Capture.open(cap)
        for name in opened.tensor_names:
            np.asarray(opened.tensor(name)).sum()
    except TftraceError as exc:  # refused: what a hostile or damaged capture should get
        _refused_as_a_user_error(exc, str(cap))


@settings(FUZZ, max_examples=EXAMPLES["compare"] * SCALE)
@given(data=st.data())
def test_fuzz_compare_on_mutated_captures(pair: dict[str, Path], tmp_path_factory: pytest.TempPathFactory,
                                          data: st.DataObject) -> None:
    """Past the reader: a mutated manifest that opens must compare, or be refused, end to end."""
    from tracer.comparison.pipeline import comparing  # noqa: PLC0415
    from tracer.report.build import report_comparison  # noqa: PLC0415

    root = tmp_path_factory.mktemp("fuzz")
    side = data.draw(st.sampled_from(["a", "b"]))
    caps = {key: _copy(pair[key], root / key) for key in ("a", "b")}
    manifest = json.loads((caps[side] / "manifest.json").read_text())
    (caps[side] / "manifest.json").write_text(json.dumps(_mutate(manifest, data)))
    try:
        with comparing(str(caps["a"]), str(caps["b"]), root / "report", isolate=0) as comparison:
            report_comparison(comparison)
    except TftraceError as exc:
        named = side.upper()  # the mutated side, by its directory or by its letter
        _refused_as_a_user_error(exc, str(caps[side]), f"{named} has", f"side {named}", f"{named}'s", f"{named}:")


@settings(FUZZ, max_examples=EXAMPLES["report"] * SCALE)
@given(data=st.data())
def test_fuzz_load_report(pair: dict[str, Path], tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    from tracer.report.contract import load_report  # noqa: PLC0415

    report = json.loads((pair["report"] / "report.json").read_text())
    out = tmp_path_factory.mktemp("report")
    text = json.dumps(_mutate(report, data))
    if data.draw(st.booleans()):
        at = data.draw(st.integers(0, len(text) - 1))
        text = text[:at] + data.draw(st.sampled_from(["", "NaN", "[", "}", "\ud800", "\x00"])) + text[at + 1:]
    (out / "report.json").write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        assert isinstance(load_report(out), dict)
    except TftraceError as exc:
        _refused_as_a_user_error(exc, "report.json")


ARTIFACT_NAMES = ["saved_model.pb", "saved_model.pbtxt", "checkpoint", "model.ckpt-1.meta", "model.ckpt-20.meta",
                  "model.ckpt-1.index", "model.ckpt-1.data-00000-of-00001", "manifest.json", "frozen.pb", "graph.pbtxt",
                  "00000123", "tensors", "variables", "x.meta", "notes.txt"]
CONTENT = st.one_of(
    st.binary(max_size=64),
    st.text(max_size=64).map(str.encode),
    st.sampled_from([b'model_checkpoint_path: "model.ckpt-1"\n', b'model_checkpoint_path: "/elsewhere/model.ckpt-1"\n',
                     b"model_checkpoint_path: \n", b"node { name: 'x' op: 'Placeholder' }", b"\x0a\x02\x08\x01", b"{}"]),
)


@pytest.mark.slow
@settings(FUZZ, max_examples=EXAMPLES["artifacts"] * SCALE)
@given(entries=st.dictionaries(st.sampled_from(ARTIFACT_NAMES), st.one_of(CONTENT, st.just(None)), min_size=1,
                               max_size=5),
       subpath=st.sampled_from(["", "saved_model.pb", "model.ckpt-1", "model.ckpt-1.meta", "frozen.pb", "00000123"]))
def test_fuzz_artifact_detection_and_loading(tmp_path_factory: pytest.TempPathFactory, entries: dict[str, bytes | None],
                                            subpath: str) -> None:
    from tracer.artifacts.loader import detect, load  # noqa: PLC0415 - imports TensorFlow (its file layer)

    root = tmp_path_factory.mktemp("artifact")
    for name, content in entries.items():
        if content is None:  # a directory, sometimes holding a SavedModel-looking file
            (root / name).mkdir()
            (root / name / "saved_model.pb").write_bytes(b"\x0a\x00")
        else:
            (root / name).write_bytes(content)
    path = str(root / subpath) if subpath else str(root)
    for attempt in (detect, lambda p: load(ArtifactRef(p))):
        try:
            attempt(path)
        except TftraceError as exc:  # refused: naming the path it was given (or a file below it), and the fix
            _refused_as_a_user_error(exc, str(root))


@pytest.mark.parametrize("state", ["a directory", "bytes that are not text"])
def test_a_checkpoint_state_file_that_is_not_text_is_refused_by_name(tmp_path: Path, state: str) -> None:
    """Found by the fuzz test above with random draws: a ``checkpoint`` entry that is a directory
    raised TensorFlow's FailedPreconditionError, one holding b"\\x80" a UnicodeDecodeError."""
    from tracer.artifacts.loader import detect  # noqa: PLC0415

    if state == "a directory":
        (tmp_path / "checkpoint").mkdir()
        expected = "is neither a checkpoint nor a SavedModel nor a capture"
    else:
        (tmp_path / "checkpoint").write_bytes(b"\x80")
        expected = "has no model_checkpoint_path line"
    with pytest.raises(TftraceError) as refused:
        detect(str(tmp_path))
    _refused_as_a_user_error(refused.value, str(tmp_path))
    assert expected in str(refused.value)

"""The "why" a comparison can give, from the cause catalogue (:mod:`tracer.cause_catalogue`).

:func:`explain_comparison` picks the causes whose signature the report shows — which rewrites
the origins sit in, which knobs or batch sizes differ between the sides, which executed op
types differ, whether the environments differ — and says so in sentences specific to the
model. ``tftrace diagnose`` measures the same causes one factor at a time and replaces the
catalogue's costs by measured ones.
"""

from __future__ import annotations

from typing import Any

from .cause_catalogue import CAUSES, KNOB_CAUSES, Cause
from .artifacts.tf2_inline import gpu_alternatives_note
from .cause_shares import NOISE_CAUSES, ranked, share_words, shares
from .comparison.statuses import DRAWN_AT_LOAD, ISOLATION, isolation_clause
from .diff.kinds import kind_of
from .optypes import loop_result
from .text import count, listed
from .rewrite_evidence import fused_resize, replayed_rewrite, unlocated_rewrites
from .side_causes import side_causes
from .training import Carriers, output_carriers, reaches_an_output, training_graph, unused_statistics

__all__ = ["Cause", "CAUSES", "explain_comparison", "first_divergence_sentence", "why_shown"]


def _isolation_causes(report: dict[str, Any], first: dict[str, Any] | None,
                      sides: tuple[dict[str, Any], dict[str, Any]], carriers: Carriers | None) -> dict[str, str]:
    """The cause the first divergence's isolation verdict points at by itself (its record's
    ``cause`` in :data:`tracer.comparison.statuses.ISOLATION`), or that the verdict
    ``within_noise`` (``--repeat``) points at, with the evidence. A weight that differs is said
    with all the weights that do (``_weights``); an own error's cause is what else differs.

    On a GPU a difference that changes from run to run is put to per-process cuDNN autotuning and
    atomics, with the knobs that tell them apart; nothing here blames the export or a kernel for it.
    Batch statistics whose difference reaches no output that differs (``carriers``:
    :func:`tracer.training.output_carriers`) point at no cause: the path the run took did not use them.
    """
    isolation = (first or {}).get("isolation") or {}
    record = ISOLATION.get(str(isolation.get("verdict")))
    cause = record.cause if record else ""
    if cause == "grappler":
        return _run_time_rewrite(report, first or {})
    if cause == "state":
        return {"state": _state_evidence(first or {}, sides)}
    if isolation.get("load_state"):
        return {"load_state": f"the value of `{first['node']}` changes from one load of the model to the next, so it "
                              "is set when the model loads, not restored; no kernel and no export is involved."}
    if report.get("verdict") == "within_noise":
        runs = (report.get("noise") or {}).get("repeats")
        return _nondeterminism(f"every difference is within what each side differs from itself over {runs} runs in "
                               "fresh processes (run-to-run nondeterminism)", sides)
    if not cause or cause == "weights" or record is None:
        return {}
    if cause == "training_graph" and not reaches_an_output(report, str((first or {}).get("node")), carriers):
        return {}
    named = f"`{first['node']}` ({first['op']})"
    if isolation.get("repeated"):  # not run-to-run: the context it runs in
        return _computed_otherwise_alone(named, _on_gpu(sides))
    what = record.evidence.format(first=named) if record.evidence else f"{named}, {record.clause}"
    return _nondeterminism(what, sides) if cause == "nondeterminism" else {cause: f"{what}."}


def _on_gpu(sides: tuple[dict[str, Any], dict[str, Any]]) -> bool:
    return any(str(side.get("device") or "").startswith("gpu") for side in sides)


def _computed_otherwise_alone(named: str, gpu: bool) -> dict[str, str]:
    """An origin whose replays agree, whose replay on one side moved from its capture, and whose
    further whole runs of that side repeated it (``isolation.repeated``): not run-to-run noise, so
    not atomics. What remains is the context it runs in: on a GPU the algorithm each process picks
    for it, on a CPU a rewrite when the graph ran that the executed graph does not name."""
    what = (f"{named} agrees on both sides when replayed alone on identical inputs, and the side whose replay moved "
            "repeated it bit for bit over further whole runs: it computes otherwise alone than inside the whole "
            "model, not from one run to the next")
    if gpu:
        return {"autotune": f"{what}; cuDNN autotuning picks each process's algorithms by timing, in the context it "
                            "runs in (compare again with `--autotune off`: identical then means autotuning was the "
                            "cause)."}
    return {"grappler": f"{what}: a rewrite when the graph ran, which the executed graph does not name."}


def _nondeterminism(what: str, sides: tuple[dict[str, Any], dict[str, Any]]) -> dict[str, str]:
    """A difference that changes from run to run (``what``): on a CPU the catalogue's
    nondeterminism, on a GPU its two candidates with the experiment that tells each."""
    if not _on_gpu(sides):
        return {"nondeterminism": f"{what}."}
    return {
        "autotune": f"{what}; cuDNN autotuning picks each process's algorithms by timing "
                    "(compare again with `--autotune off`: identical then means autotuning was the cause).",
        "atomics": "kernels that accumulate with atomics differ from run to run even with one algorithm "
                   "(compare again with `--determinism`).",
    }


def _state_caveat(report: dict[str, Any]) -> list[str]:
    """For sides that agree although the model changes its own variables on every run: what the
    agreement covers (the same runs from a fresh load), so it is not read as "the model repeats"."""
    observed = [side for side in (report.get("observer_effect") or {}).values()
                if isinstance(side, dict) and side.get("explained_by_state")]
    if not observed:
        return []
    ops = observed[0].get("stateful_ops") or []
    return [f"The model changes its own variables on every run ({listed(ops, 3)}): the sides agree run for run from a fresh "
            "load, but its results on the same inputs change from one run to the next."]


def _gpu_implementation_caveat(report: dict[str, Any]) -> list[str]:
    """For a side that ran on a GPU a model whose layers TensorFlow would run otherwise there (Keras
    2's cuDNN LSTM/GRU, swapped in at run time, which the inlined signature cannot): whatever the
    sides' verdict, it is not about what TensorFlow Serving computes on that GPU for those layers."""
    lines = []
    for key, side in sorted((report.get("sides") or {}).items()):
        names = (side.get("artifact") or {}).get("gpu_alternatives")
        if _on_gpu((side,)) and isinstance(names, list) and names:
            lines.append(f"Side {key.upper()} ran on a GPU, and {gpu_alternatives_note([str(n) for n in names])}.")
    return lines


def _state_evidence(first: dict[str, Any], sides: tuple[dict[str, Any], dict[str, Any]]) -> str:
    """What an origin that reads the model's own state (isolation ``state``) shows: the variable's
    writers, and, when the sides batch differently, why their earlier runs differ."""
    writes = (first.get("isolation") or {}).get("writes") or []
    written = f" ({listed(writes, 1, '`')})" if writes else ""
    a, b = (side.get("batch_size") for side in sides)
    runs = (f"; the sides run batch {a} vs {b}, so they had run the model a different number of times before the "
            "runs compared" if a != b else "; the sides' earlier runs left it different")
    return (f"`{first.get('node')}` ({first.get('op')}) reads a variable that the model writes on every "
            f"run{written}, so each run reads what the runs before it left{runs}; replayed in fresh processes both "
            "sides read the same value: no kernel, input or export differs.")


def _own_error_words(report: dict[str, Any], first: dict[str, Any]) -> str:
    """What differs given identical inputs at ``first``, the origin isolated as its own error,
    named: its kernel, the op with the while loop above it, or the while loop whose result it is
    (an Exit or a TensorArray reader is replayed with its loop). Where the first divergence beyond
    tolerance is another op, which only inherits it, that is said too: the cause's share names
    that op, and an unnamed "the origin op" beside it read as its own error."""
    named = f"`{first.get('node')}` ({first.get('op')})"
    if (first.get("isolation") or {}).get("loop"):
        words = f"the difference starts at {named}, which, replayed with the while loop above it, differs given " \
                "identical inputs"
    else:
        words = f"the difference starts at {named}, {isolation_clause('own_error', loop_result(str(first.get('op') or '')))}"
    beyond = report.get("first_divergence_beyond_tolerance")
    if isinstance(beyond, dict) and beyond.get("node") not in (None, first.get("node")) and \
            (beyond.get("isolation") or {}).get("verdict") == "inherited":
        words += f"; `{beyond['node']}` ({beyond.get('op')}), the first beyond tolerance, only inherits it"
    return words


def _run_time_rewrite(report: dict[str, Any], first: dict[str, Any]) -> dict[str, str]:
    """The evidence for a rewrite applied when the graph ran: the two runs executed the origin as
    different kernels, and alone, on identical inputs, it agrees (isolation ``run_time_rewrite``)."""
    executed = (first.get("isolation") or {}).get("executed") or {}
    ran = {key: " + ".join(form) for key, form in executed.items() if form}
    evidence = (f"inside the whole graph `{first['node']}` ({first['op']}) ran as {ran.get('a', '?')} on side A and as "
                f"{ran.get('b', '?')} on side B, while replayed alone on identical inputs the two sides agree bit for "
                "bit; `--grappler remapping=off` on both sides is the first experiment.")
    if any(r.get("kind") == "variable_frozen" for r in report.get("rewrites") or []):
        evidence += (" Freezing turned variables into constants, which is exact in the graph, but Grappler "
                     "rewrites an op whose parameters are constants differently from one that reads variables"
                     + (" (its remapper splits an inference batch norm with constant parameters into Mul + Add)."
                        if str(first.get("op", "")).startswith("FusedBatchNorm") else "."))
    return {"grappler": evidence}


def _build_name(env: dict[str, Any]) -> str:
    """A TensorFlow build in a few words: release, git version, CUDA where it has it."""
    build = env.get("build") or {}
    extra = [str(env.get("tf_git_version"))] if env.get("tf_git_version") else []
    if build.get("is_cuda_build"):
        extra.append(f"CUDA {build.get('cuda_version')}, cuDNN {build.get('cudnn_version')}")
    return f"TensorFlow {env.get('tensorflow')}" + (f" ({', '.join(extra)})" if extra else "")


def _builds(env_a: dict[str, Any], env_b: dict[str, Any], first: dict[str, Any] | None,
            rewritten: list[dict[str, Any]], rewrites: list[dict[str, Any]]) -> str:
    """The evidence that the builds differ, and what of the difference they account for.

    Where the graphs match at the origins (none sits in a rewrite between the artifacts), the
    builds are what differs, and the first divergence's isolation says how: replayed alone on
    identical inputs under each side's own TensorFlow, its kernels differ (``own_error``: a kernel
    change between the releases), or agree while the whole graphs executed it as different
    kernels (``run_time_rewrite``: a Grappler change between the releases). A run-time rewrite is
    the builds' only where the graphs match throughout (``rewrites``, the report's, exact ones
    too): a frozen graph's constants alone make Grappler split a batch norm, in any release."""
    said = f"{_build_name(env_a)} on side A vs {_build_name(env_b)} on side B"
    isolation = (first or {}).get("isolation") or {}
    if not first or rewritten:
        return said + "."
    verdict = isolation.get("verdict")
    if verdict == "own_error":
        return (f"{said}; the graphs match where the numbers part, and `{first['node']}` ({first['op']}) is the first "
                f"op whose kernel differs: replayed alone on identical inputs, each in its side's own TensorFlow, "
                f"the two builds' kernels differ by up to {isolation.get('max_abs'):.3g} (a kernel change between "
                "the builds).")
    if verdict == "run_time_rewrite":
        ran = {key: " + ".join(form) for key, form in (isolation.get("executed") or {}).items() if form}
        kinds = sorted({str(r.get("kind")) for r in rewrites if isinstance(r, dict)})
        if kinds:
            return (f"{said}; `{first['node']}` ({first['op']}) ran as {ran.get('a', '?')} on side A and as "
                    f"{ran.get('b', '?')} on side B, and replayed alone, each in its side's own TensorFlow, the two "
                    f"agree: a rewrite when the graph ran, which the graphs' own difference ({len(rewrites)} "
                    f"{', '.join(kinds)}) can make in any release as well as a Grappler change between the builds "
                    "(compare each artifact with itself across the builds to tell which).")
        return (f"{said}; the graphs match, but the builds' Grappler ran `{first['node']}` ({first['op']}) as "
                f"{ran.get('a', '?')} on side A and {ran.get('b', '?')} on side B, and replayed alone the two agree "
                "(a Grappler change between the builds, not a kernel's).")
    return f"{said}; the graphs match where the numbers part, at `{first['node']}` ({first['op']})."


WEIGHTS_NAMED = 3  # the changed weights a sentence names before "and N more"


def _weights(report: dict[str, Any], origins: list[dict[str, Any]]) -> dict[str, str]:
    """The evidence that the two sides hold different weights: every ``const_changed`` of the
    report, counted and named together (one change to the model's weights, not N findings), and
    whether the other side holds exactly the checkpoint's moving averages of them.

    Said only when a difference starts there (an origin in a const_changed, or isolated as
    ``weights_differ``); the moving averages only when their digests match, never from names.
    """
    starts = [o for o in origins if _in_weights(o)]
    if not starts:
        return {}
    changed = [r for r in report.get("rewrites") or [] if isinstance(r, dict) and r.get("kind") == "const_changed"
               and r.get("a_nodes")] or [{"a_nodes": [o["node"]], "detail": {}} for o in starts]  # no diff recorded
    details = {str(r["a_nodes"][0]): r["detail"] if isinstance(r.get("detail"), dict) else {} for r in changed}
    sizes = [d.get("max_abs_change") for d in details.values() if isinstance(d.get("max_abs_change"), (int, float))]
    head = (f"{_count(len(details), 'weight')} {'differs' if len(details) == 1 else 'differ'} between A and B "
            f"({_named(list(details))}){f', by up to {max(sizes):.3g}' if sizes else ''}")
    averages = {name: d["moving_average"] for name, d in details.items() if isinstance(d.get("moving_average"), dict)}
    held = {name: a for name, a in averages.items() if a.get("matches") is True}
    if held:
        return _averages_held(head, list(details), held)
    if not averages:
        return {"weights": f"{head}."}
    side = str(next(iter(averages.values())).get("checkpoint", "a")).upper()
    return {"weights": f"{head}; {side}'s checkpoint also holds moving averages of {len(averages)} of them, but the "
                       "other side's values are not those averages."}


def _averages_held(head: str, names: list[str], held: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The evidence when the other side holds, bit for bit, the checkpoint's moving averages of
    some of the changed weights (``held``): the export restored them; the rest differ otherwise."""
    side = str(next(iter(held.values())).get("checkpoint", "a")).upper()
    other = "B" if side == "A" else "A"
    which = "all of them" if len(held) == len(names) else f"{len(held)} of them ({_named(list(held))})"
    found = {"moving_averages": (
        f"{head}. {other} holds, bit for bit, {side}'s checkpoint's moving averages of {which} (each "
        f"`<variable>/ExponentialMovingAverage` in {side}'s checkpoint): the export restored the moving averages "
        "into the variables, so it is compared with weights it does not hold.")}
    rest = [name for name in names if name not in held]
    if rest:
        found["weights"] = (f"the {'other weight' if len(rest) == 1 else f'other {len(rest)} weights'} "
                            f"({_named(rest)}) {'is' if len(rest) == 1 else 'are'} not {side}'s checkpoint's "
                            "moving average.")
    return found


def _points_at(origin: dict[str, Any], cause: str) -> bool:
    """Whether an origin's isolation verdict points at ``cause`` by itself (its record's ``cause``)."""
    record = ISOLATION.get(str((origin.get("isolation") or {}).get("verdict")))
    return record is not None and record.cause == cause


def _in_weights(origin: dict[str, Any]) -> bool:
    """Whether a difference starts at a weight: an origin in a const_changed, or isolated as one
    (never a variable set anew at each load: that is the loading, ``load_state``)."""
    isolation = origin.get("isolation") or {}
    if isolation.get("load_state"):
        return False
    return origin.get("rewrite") == "const_changed" or _points_at(origin, "weights")


def _weights_met_before(report: dict[str, Any], first: dict[str, Any]) -> int:
    """How many differing weights the first divergence was chosen among (0 when it is no weight,
    or the only one): the examples meet it first (the order :meth:`tracer.opgraph.OpGraph.flow_order`
    gives), which no name decides."""
    changed = sum(1 for r in report.get("rewrites") or [] if isinstance(r, dict) and r.get("kind") == "const_changed")
    return changed if changed >= 2 and _in_weights(first) else 0


def _first(report: dict[str, Any]) -> dict[str, Any] | None:
    """The op report.json calls the first divergence (bitwise), as the title and the terminal do."""
    first = report.get("first_divergence") or report.get("first_divergence_beyond_tolerance")
    return first if isinstance(first, dict) and first.get("node") else None


def first_divergence_sentence(report: dict[str, Any]) -> str:
    """The sentence that closes report.json's ``why``: the first divergence, named in words an API
    reader gets without the renderers' first-divergence line."""
    first = _first(report)
    if not first:
        return ""
    among = _weights_met_before(report, first)
    return (f"The first divergence is `{first['node']}` ({first.get('op')})"
            + (f": of the {among} weights that differ, the one the examples meet first." if among else "."))


def why_shown(report: dict[str, Any], why: list[str]) -> list[str]:
    """The ``why`` as the terminal, report.md and report.html show it: under their own
    first-divergence line the sentence that restates it is left out (the op was named a third
    time); what it adds among several differing weights stays, in a sentence of its own."""
    sentence = first_divergence_sentence(report)
    if not sentence:
        return list(why)
    first = _first(report) or {}
    among = _weights_met_before(report, first)
    shown = []
    for line in why:
        if line.strip() == sentence:
            if among:
                shown.append(f"Of the {among} weights that differ, the examples meet `{first['node']}` first.")
            continue
        shown.append(line.replace(f" {sentence}", "") if f" {sentence} " in f"{line} " else line)
    return shown


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _named(names: list[str]) -> str:
    """The first few names in backticks, and how many more."""
    return listed(names, WEIGHTS_NAMED, "`")


def _cost_line(cause: Cause) -> str:
    """What a cause's remedy costs, as the catalogue says; a cost measured by ``tftrace diagnose``
    is marked as the catalogue's until then, a remedy that costs nothing is not."""
    measured = "" if cause.cost.startswith("none") else " (catalogue figure; `tftrace diagnose` measures it on this model)"
    return f"{cause.title.split(' (')[0]}: {cause.cost}{measured}."


def _nothing_measured_apart(report: dict[str, Any]) -> bool:
    """Whether every op that differs between the sides differs by no more than each side differs
    from itself between fresh processes, with the outputs bit-identical: then what sets the sides
    apart (batch size, a knob, device, build, CPU) changed nothing measured, and naming it a cause
    would be a guess (a weight set afresh at each load moves alone: TF Serving's half_plus_two_mkl,
    at batch 1 vs 4 and with oneDNN off vs on, once blamed the batch and then oneDNN for it)."""
    return report.get("verdict_ops") == "within_noise" and report.get("verdict_outputs") == "identical"


def _drawn_at_load(report: dict[str, Any]) -> str:
    """What moves between the loads, where isolation found it drawn anew at each load (an
    initialiser that runs when the model loads, for a variable the artifact does not hold): the
    mechanism of a difference that no setting causes. Where the noise alone judged it (a GPU side,
    whose noise is measured before anything is isolated), nothing is said of why it moves."""
    drawn = sorted(name for name, node in (report.get("nodes") or {}).items() if node.get("reason") == DRAWN_AT_LOAD)
    if not drawn:
        return ""
    verb = "is" if len(drawn) == 1 else "are"
    return (f" {_named(drawn)} {verb} drawn anew at every load of the model (set at load, not restored), so "
            f"{'it differs' if len(drawn) == 1 else 'they differ'} between any two loads.")


def _apart_causes(report: dict[str, Any], first: dict[str, Any] | None, rewritten: list[dict[str, Any]],
                  state: bool) -> dict[str, str]:
    """The causes in what sets the sides apart, each with its evidence: another batch size (unless
    the origin reads the model's state or normalises by its batch: then the runs made or the examples
    that share one matter, not the kernels), a knob set differently, another device, another
    TensorFlow build or CPU. None where nothing measured differs beyond the sides' own noise."""
    if _nothing_measured_apart(report):
        return {}
    sides = report.get("sides", {})
    a, b = sides.get("a", {}), sides.get("b", {})
    found: dict[str, str] = {}
    if a.get("batch_size") != b.get("batch_size") and not state:
        own = first and (first.get("isolation") or {}).get("verdict") == "own_error"
        deterministic = all((side.get("knobs") or {}).get("determinism") for side in (a, b))
        found["batch"] = (
            f"the sides run batch {a.get('batch_size')} vs {b.get('batch_size')}"
            + (f"; {_own_error_words(report, first)}." if own else ".")
            + (" Both sides ran with op determinism on: determinism makes a run repeatable, not batch-size "
               "invariant." if deterministic else "")
        )
    knobs_a, knobs_b = a.get("knobs", {}), b.get("knobs", {})
    for knob in sorted(set(knobs_a) | set(knobs_b)):
        if knobs_a.get(knob) != knobs_b.get(knob) and knob in KNOB_CAUSES:
            cause = KNOB_CAUSES[knob]
            grappler = dict(knobs_a.get("grappler") or {}) | dict(knobs_b.get("grappler") or {})
            if knob == "grappler" and any(k.startswith("auto_mixed_precision") for k in grappler):
                cause = "mixed_precision"
            found.setdefault(cause, f"`{knob}` differs: {knobs_a.get(knob, 'default')} vs {knobs_b.get(knob, 'default')}.")
    if a.get("device") != b.get("device"):
        found.setdefault("tf32", f"the sides run on {a.get('device')} vs {b.get('device')}.")
    env_a, env_b = a.get("environment", {}), b.get("environment", {})
    if env_a.get("tensorflow") != env_b.get("tensorflow") or env_a.get("build") != env_b.get("build"):
        found["build"] = _builds(env_a, env_b, first, rewritten, report.get("rewrites") or [])
    elif (env_a.get("cpu") or {}).get("model") != (env_b.get("cpu") or {}).get("model"):
        found.setdefault("onednn", "the sides ran on different CPUs, where oneDNN and kernel choices differ.")
    return found


def explain_comparison(report: dict[str, Any]) -> dict[str, Any]:
    """The why / prevent / cost a single comparison can support, from the report dict alone."""
    found: dict[str, str] = {}  # cause key -> the evidence sentence
    sides = report.get("sides", {})
    a, b = sides.get("a", {}), sides.get("b", {})
    origins = report.get("origins") or []
    # the op report.json calls the first divergence (bitwise), as the title and the terminal do
    first = _first(report)
    where = f" {first_divergence_sentence(report)}" if first else ""
    if report.get("verdict") == "identical":
        # Nothing diverged: a difference between the sides (batch size, a knob) is no cause of anything.
        return {"why": ["The two sides compute bit-identical results for these examples.", *_state_caveat(report),
                        *_gpu_implementation_caveat(report)],
                "prevent": [], "cost": [], "source": "compare", "causes": []}
    # a batch norm in training mode: its mode, not its kernel or an export's rewrite of it (tracer.training)
    carriers = output_carriers(report)  # one walk, for every question of reach below
    training, norms = training_graph(report, carriers) or ("", set())
    if training:
        found["training_graph"] = training
    for cause, evidence in _isolation_causes(report, first, (a, b), carriers).items():
        found.setdefault(cause, evidence)  # the training graph's evidence above says more than its isolation's
    found.update(_weights(report, origins))
    # an origin in a rewrite points at its kind's cause (tracer.diff.kinds); exact kinds at none;
    # changed weights (const_changed) are said above, all of them together
    rewritten = [o for o in origins if getattr(kind_of(o.get("rewrite")), "cause", None) not in (None, "weights")
                 and o.get("node") not in norms]
    if rewritten:
        kinds = sorted({o["rewrite"] for o in rewritten})
        causes = {kind.cause for kind in map(kind_of, kinds) if kind and kind.cause}  # several: the catalogue's first
        found[min(causes, key=list(CAUSES).index)] = (
            f"{count(len(rewritten), 'origin')} {'sits' if len(rewritten) == 1 else 'sit'} in export rewrites "
            f"({', '.join(kinds)}), e.g. `{rewritten[0]['node']}`"
            + replayed_rewrite(report, rewritten[0]) + "." + fused_resize(report)
        )
    # rewrites no origin sits in, where nothing found inside (but run-to-run noise) shows where the outputs' gap starts
    if not rewritten and set(found) <= set(NOISE_CAUSES):
        for cause, evidence in unlocated_rewrites(report).items():
            found.setdefault(cause, evidence)
    # an origin that reads the model's state, or normalises by its batch: the batch sizes matter through the
    # runs made or the examples that share one, not the kernels
    state = bool(first) and (_points_at(first, "state") or first.get("node") in norms)
    for cause, evidence in _apart_causes(report, first, rewritten, state).items():
        if cause in ("batch", "build"):  # their evidence says more than any other finding's words for them
            found[cause] = evidence
        else:
            found.setdefault(cause, evidence)
    for cause, evidence in side_causes(report).items():
        found.setdefault(cause, evidence)
    if not found and origins:
        op_types = sorted({o["op"] for o in origins})
        return {
            "why": [f"No setting, batch size, graph rewrite or environment difference explains it: the origins are "
                    f"{', '.join(op_types)} ops.{where} Run `tftrace diagnose` to test each factor on its own.",
                    *_gpu_implementation_caveat(report)],
            "prevent": [], "cost": [], "source": "compare", "causes": [],
        }
    measured = shares(report, found, carriers)  # what each cause accounts for: the causes ranked by it (cause_shares)
    order = ranked(found, measured)
    why = [f"{CAUSES[k].title[0].upper()}{CAUSES[k].title[1:]} [{share_words(measured[k])}]: {found[k]}"
           for k in order]
    if why and where:
        why.append(where.strip())
    if not why and _nothing_measured_apart(report):
        why.append("Every op that differs between the sides differs by no more than each side differs from itself "
                   "between fresh processes, and the outputs are bit-identical: nothing measured here is caused by "
                   "what sets the sides apart." + _drawn_at_load(report))
    unused = unused_statistics(report, carriers)
    if unused:
        why.append(unused)
    why += _gpu_implementation_caveat(report)
    return {
        "why": why,
        "prevent": [f"{CAUSES[k].title.split(' (')[0]}: {CAUSES[k].remedy}." for k in order],
        "cost": [_cost_line(CAUSES[k]) for k in order],
        "source": "compare",
        "causes": order,
        "shares": [measured[k] for k in order],  # each cause's measured magnitude, biggest first
    }

"""tftrace: find where two runs of a TensorFlow model start to give different numbers, and why.

Nothing here imports TensorFlow at import time: comparisons and reports work on machines
without it; loading and running a model (in child processes) need it.
"""

from __future__ import annotations

import tempfile
from typing import TYPE_CHECKING, Any

from ._version import __version__

from .errors import TftraceError

__all__ = [
    "TftraceError", "load", "diff_graphs", "capture", "compare", "assert_equivalent", "diagnose", "__version__",
    "RunToRunNoiseWarning",
]

if TYPE_CHECKING:
    from .artifacts.loader import Artifact, ArtifactRef
    from .captures.reader import Capture
    from .comparison.pipeline import Comparison
    from .runspec import Side
    from .comparison.static import StaticDiff


def load(path: str | ArtifactRef, *, allow_unsafe_ops: bool = False) -> Artifact:
    """Detect and load an artifact (checkpoint, SavedModel, GraphDef) statically.

    A TF2 SavedModel is the exception (loading it runs its initialisers): one whose loading
    would reach outside the computation is refused unless ``allow_unsafe_ops``."""
    from .artifacts.loader import load as _load  # noqa: PLC0415

    return _load(path, allow_unsafe_ops=allow_unsafe_ops)


def diff_graphs(a: str | ArtifactRef, b: str | ArtifactRef, *, allow_unsafe_ops: bool = False) -> StaticDiff:
    """Classify every rewrite between two artifacts' inference subgraphs."""
    from .comparison.static import diff_artifacts  # noqa: PLC0415

    return diff_artifacts(a, b, allow_unsafe_ops=allow_unsafe_ops)


def _side(target: str | Side, options: dict[str, Any], specific: dict[str, Any] | None = None) -> Side:
    """A Side from API keywords (see :data:`tracer.options.OPTIONS`); a Side is kept as given."""
    from .options import build_side, side_values  # noqa: PLC0415

    return target if not isinstance(target, str) else build_side(target, side_values(options, specific))


def capture(artifact: str | Side, out_dir: str, *, force: bool = False, **side: Any) -> Capture:
    """Run one side in a child process and record every intermediate tensor into ``out_dir``.

    ``side``: the keywords of :func:`tracer.options.api_keywords` ``("capture")`` (device, batch_size,
    onednn, ..., grappler and env as dicts, inputs_file, seed, examples, tag, signature, max_memory,
    part_bytes, max_process_memory, allow_unsafe_ops); an unknown one is a TftraceError naming them.
    """
    from .captures.launcher import capture as _capture  # noqa: PLC0415
    from .options import check_keywords  # noqa: PLC0415

    check_keywords("capture", side)
    return _capture(_side(artifact, side), out_dir, force=force)


def compare(
    a: str | Side, b: str | Side, out_dir: str | None = None, *, a_options: dict | None = None,
    b_options: dict | None = None, force: bool = True, **options: Any,
) -> Comparison:
    """Compare two sides (artifacts or capture directories); ``bool(result)`` is True when no
    divergence beyond tolerance was found (by default at the outputs; ``intermediates_decide=True``:
    at any op). ``options``: atol, rtol, tol, isolate, signature_map, intermediates_decide,
    repeat (None: a second run where a side can change from run to run; 1: never), keep_captures (keep the sides captured here in ``out_dir/captures``, to read their
    tensors afterwards), allow_unsafe_ops, plus side options applied to both sides;
    ``a_options``/``b_options`` override side options per side (:func:`tracer.options.api_keywords`
    lists them; an unknown keyword is a TftraceError naming them)."""
    from .comparison.pipeline import comparing  # noqa: PLC0415
    from .options import check_keywords, compare_settings  # noqa: PLC0415
    from .report.build import report_comparison  # noqa: PLC0415

    check_keywords("compare", options)
    for name, specific in (("a_options", a_options), ("b_options", b_options)):
        check_keywords("compare", specific or {}, per_side=True, where=f" {name}")
    side_a = a if _is_capture(a) else _side(a, options, a_options)
    side_b = b if _is_capture(b) else _side(b, options, b_options)
    out = out_dir or tempfile.mkdtemp(prefix="tftrace-")
    with comparing(side_a, side_b, out, force=force, **compare_settings(options)) as result:
        return report_comparison(result)


def _is_capture(target: Any) -> bool:
    from .captures.reader import is_capture_dir  # noqa: PLC0415

    return isinstance(target, str) and is_capture_dir(target)


class RunToRunNoiseWarning(UserWarning):
    """:func:`assert_equivalent` passed, but a side does not repeat itself: the equivalence holds
    within each side's run-to-run noise, which the warning's text measures."""


def assert_equivalent(a: str | Side, b: str | Side, *, rtol: float = 1e-5, atol: float = 1e-6, **options: Any) -> Comparison:
    """For unit tests: raise AssertionError when A's and B's outputs (the plain runs, as production
    computes them) differ beyond tolerance, naming the first divergent op, its type, the max output
    difference and the report path; or naming the outputs that could not be compared (equivalence
    not shown is not equivalence). ``intermediates_decide=True`` makes intermediate ops beyond
    tolerance fail it too. The message leads with the headline (a side that changes from run to
    run is said first); a pass on sides that do not repeat themselves warns
    :class:`RunToRunNoiseWarning` with the same words. A pass leaves nothing behind (the report's
    temporary directory is removed: a test suite calling it often filled /tmp, 1.5-4.5 MB a call)
    unless ``out_dir`` or ``keep_captures`` asked to keep it; a failure keeps the report it names."""
    result = compare(a, b, atol=atol, rtol=rtol, **options)
    temporary = options.get("out_dir") is None and not options.get("keep_captures")
    from .report.headline import headline  # noqa: PLC0415
    from .report.summary import outputs_not_compared  # noqa: PLC0415

    report = result.report
    told = headline(report)
    noise = " ".join(line["text"] for line in told if line["key"] in ("noise", "noise_not_measured"))
    missing = outputs_not_compared(report)
    if result and missing:
        raise AssertionError(
            f"{a} and {b}: could not compare {'the output' if len(missing) == 1 else 'the outputs'} "
            + "; ".join(f"{k!r} ({why})" for k, why in missing.items())
            + f"; report: {result.out_dir}/report.html"
        )
    if result:
        if any(line["key"] == "noise" for line in told):
            import warnings  # noqa: PLC0415

            warnings.warn(f"{a} and {b} agree within their run-to-run noise: {noise}", RunToRunNoiseWarning,
                          stacklevel=2)
        if temporary:
            import shutil  # noqa: PLC0415

            shutil.rmtree(result.out_dir, ignore_errors=True)
        return result
    first = report.get("first_divergence_beyond_tolerance") or report.get("first_divergence") or {}
    worst = max(((k, o.get("max_abs")) for k, o in report["outputs"].items() if isinstance(o.get("max_abs"), float)),
                key=lambda kv: kv[1], default=("?", None))
    isolation = (first.get("isolation") or {}).get("verdict", "not isolated")
    from .report.summary import unobserved_divergence  # noqa: PLC0415

    where = (f"first at op {first.get('node')!r} ({first.get('op')}; {isolation})" if first
             else unobserved_divergence(report) or "no op found")
    judged = ("outputs and intermediates" if report.get("verdict_decided_by") == "outputs_and_intermediates"
              else "outputs")
    raise AssertionError(
        (f"{noise} " if noise else "")
        + f"{a} and {b}: {judged} diverge beyond atol={atol:g}, rtol={rtol:g}: {where}, max abs difference at the "
        f"outputs {worst[1]!r} on {worst[0]!r}; report: {result.out_dir}/report.html"
    )


def diagnose(model: str | ArtifactRef, out_dir: str, *, console: Any = None, **options: Any) -> Any:
    """Run the experiment matrix on ``model`` and answer why / how to prevent / what it costs.

    ``options``: the keywords of :func:`tracer.options.api_keywords` ``("diagnose")`` (savedmodel,
    batch_sizes, quick, only, ...); an unknown one is a TftraceError naming them. Progress goes to
    ``console`` (stderr by default).
    """
    from .diagnosis.cli import diagnose_options  # noqa: PLC0415
    from .diagnosis.run import run_diagnosis  # noqa: PLC0415
    from .options import check_keywords  # noqa: PLC0415

    check_keywords("diagnose", options)
    return run_diagnosis(diagnose_options(model, out_dir, options), console)


# The subpackages docs/commands.md (Python API) names after ``import tracer`` (``tracer.options.api_keywords``,
# ``tracer.captures.Capture``), imported on first use: ``import tracer`` stays cheap for the CLI.
_SUBMODULES = frozenset({"options", "captures", "comparison", "report", "artifacts", "diff", "metrics", "errors"})


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        import importlib  # noqa: PLC0415

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'tracer' has no attribute {name!r}")

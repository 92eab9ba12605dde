"""``--max-memory`` holds at run time (issue 15, item 4): shapes known only when the model runs,
and checkpoints larger than the limit.

A ``tf.fill`` sized from an input *value* has no static size (its estimate counts the unknown
dimension as 1). The traced plain run measures it, so it is refused before the capture
directory exists; a tensor the plain runs did not execute (a node Grappler renamed) is checked as it comes back,
before a byte of it is written. A checkpoint is measured from its index before it is restored.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, assert_user_error, run_cli
from tracer.captures.fetch_plan import FetchPlan, check_fetched, chunked, refit_sizes
from tracer.errors import TftraceError

LIMIT = 20_000_000
BIG = 10_000_000  # floats: 40,000,000 bytes, twice the limit

FILL_MODEL = """
import sys, tensorflow as tf
tf1 = tf.compat.v1
g = tf1.Graph()
with g.as_default():
    x = tf1.placeholder(tf.float32, [None, 2], name="x")
    on_path = tf.fill(tf.reshape(tf.cast(tf.reduce_max(x[:, 0]), tf.int32), [1]), 1.0, name="on_path")
    y = tf.identity(x * tf.reduce_mean(on_path), name="y")
    with tf1.Session(graph=g) as s:
        b = tf1.saved_model.Builder(sys.argv[1])
        sig = tf1.saved_model.predict_signature_def({"x": x}, {"y": y})
        b.add_meta_graph_and_variables(s, ["serve"], signature_def_map={"serving_default": sig})
        b.save()
"""


@pytest.fixture(scope="module")
def fill_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fill") / "savedmodel"
    subprocess.run([sys.executable, "-c", FILL_MODEL, str(path)], check=True, cwd=REPO)
    return path


def _inputs(tmp_path: Path, on: float) -> Path:
    path = tmp_path / "inputs.npz"
    np.savez(path, x=np.array([[on, 1.0], [1.0, 1.0]], np.float32))
    return path


# --------------------------------------------------------------------------- TF-free


def _plan(sizes: dict[str, int], limit: int) -> FetchPlan:
    return FetchPlan(list(sizes), dict(sizes), set(), max_memory=limit)


def test_refit_sizes_chunks_by_measured_sizes_and_refuses_what_alone_exceeds() -> None:
    plan = _plan({"a:0": 4, "b:0": 4, "c:0": 4}, 100)
    assert chunked(plan.names, plan.sizes, plan.max_memory) == [["a:0", "b:0", "c:0"]]
    refit_sizes(plan, {"a:0": 60, "b:0": 60, "other:0": 10**9})  # a name not planned is ignored
    assert chunked(plan.names, plan.sizes, plan.max_memory) == [["a:0"], ["b:0", "c:0"]]
    with pytest.raises(TftraceError, match=r"tensor b:0 is 101 bytes per run on these inputs \(its shape is set at "
                                           r"run time\), more than --max-memory 100"):
        refit_sizes(plan, {"b:0": 101})


def test_check_fetched_refuses_over_the_limit_and_learns_sizes_under_it() -> None:
    plan = _plan({"a:0": 4}, 100)
    check_fetched(plan, "a:0", 80)
    assert plan.sizes["a:0"] == 80  # later runs chunk by what really came back
    with pytest.raises(TftraceError, match=r"tensor a:0 is 101 bytes per run as fetched .* 100; nothing of it was written"):
        check_fetched(plan, "a:0", 101)


# --------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_fill_sized_by_an_input_value_is_refused_before_the_capture_exists(fill_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "cap"
    proc = run_cli("capture", str(fill_model), "--out", str(out), "--max-memory", str(LIMIT),
                   "--inputs", str(_inputs(tmp_path, BIG)))
    assert_user_error(proc, f"tensor on_path:0 is {4 * BIG:,} bytes per run on these inputs (its shape is set at "
                            f"run time), more than --max-memory {LIMIT:,}", "aise --max-memory")
    assert not out.exists()
    # the same model and limit on small values: captured (the limit is about what comes back)
    ok = run_cli("capture", str(fill_model), "--out", str(out), "--max-memory", str(LIMIT),
                 "--inputs", str(_inputs(tmp_path, 1000)))
    assert ok.returncode == 0, ok.stderr
    assert (out / "manifest.json").is_file()


@pytest.mark.slow
def test_fill_sized_by_a_later_batch_is_refused_before_the_capture_exists(fill_model: Path, tmp_path: Path) -> None:
    """Every plain batch is measured, not only the first: the second example sizes the fill."""
    out = tmp_path / "cap"
    path = tmp_path / "inputs.npz"
    np.savez(path, x=np.array([[1000.0, 1.0], [BIG, 1.0]], np.float32))
    proc = run_cli("capture", str(fill_model), "--out", str(out), "--max-memory", str(LIMIT), "--inputs", str(path),
                   "--batch-size", "1")
    assert_user_error(proc, f"tensor on_path:0 is {4 * BIG:,} bytes per run on these inputs", f"--max-memory {LIMIT:,}")
    assert not out.exists()


@pytest.mark.slow
def test_checkpoint_larger_than_max_memory_is_refused_before_restoring(models: dict[str, Path], tmp_path: Path) -> None:
    for name in ("detector_ckpt", "detector"):  # a TF1 checkpoint, a SavedModel's variables/
        out = tmp_path / name
        proc = run_cli("capture", str(models[name]), "--out", str(out), "--max-memory", "10000000")
        assert_user_error(proc, "take 18,222,528 bytes (26 variables in its index; the largest, 'dense/weights', "
                          "16,777,216 bytes), more than --max-memory 10,000,000; restoring them would load them all "
                          "into memory")
        assert not out.exists()


def test_a_received_isolation_job_cannot_raise_the_memory_limit(monkeypatch) -> None:
    """`tftrace isolate --from` runs a job file that came with a report from anyone: its
    max_memory may lower the limit, never raise it past the caller's (default 2 GiB)."""
    from tracer.comparison import isolate
    from tracer.artifacts.loader import ArtifactRef
    from tracer.runspec import Side

    seen = {}
    monkeypatch.setattr(isolate, "run_child", lambda job, side, **_: seen.update(side=side, job=job))
    huge = Side(ArtifactRef("model"), max_memory=1 << 40).to_json()
    isolate.run_job({"side": huge, "ops": []}, allow_unsafe_ops=False)
    assert seen["side"].max_memory == 2 << 30 and seen["job"]["side"]["max_memory"] == 2 << 30
    isolate.run_job({"side": huge, "ops": []}, allow_unsafe_ops=False, max_memory=1000)
    assert seen["side"].max_memory == 1000
    isolate.run_job({"side": Side(ArtifactRef("model"), max_memory=5000).to_json(), "ops": []}, allow_unsafe_ops=False)
    assert seen["side"].max_memory == 5000

"""A TF1 ``tf.map_fn`` (control flow v1: TensorArrays, Enter/Exit frames), as TF1 detectors ran
their per-image NMS, compared against exports that differ inside and before the loop.

The gather after the loop reads ``TensorArrayGatherV3(handle, indices, flow)``; the loop's Exit
carries only the flow, a dummy scalar. Replaying the gather with that flow fed read a freshly
created, empty TensorArray, and the child's failure cost the user the whole report (exit 2);
judging the gather by its flow called it an origin even when its data came from a loop whose
inputs already differed. See tests/fixtures/tf1_map_export.py for the artifacts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, run_cli
from tracer.comparison.statuses import isolation_words

pytestmark = pytest.mark.slow

GATHER = "map/TensorArrayStack/TensorArrayGatherV3"  # the map's result, read after its loop
FLOW_EXIT = "map/while/Exit_2"  # the loop's Exit that carries the gathered TensorArray's flow
DENSE = "dense/MatMul"  # before the loop
ENV = {"TF_ENABLE_ONEDNN_OPTS": "0", "CUDA_VISIBLE_DEVICES": "-1"}


@pytest.fixture(scope="module")
def map_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``ckpt/``, ``savedmodel/``, ``export_variant/`` (a constant changed in the loop body) and
    ``export_fp16/`` (the dense layer before the loop in float16), and the same under ``cf2/``
    with TF2 control flow, built in a child process."""
    out = tmp_path_factory.mktemp("tf1_map") / "models"
    subprocess.run([sys.executable, str(REPO / "tests" / "fixtures" / "tf1_map_export.py"), str(out)], cwd=REPO,
                   check=True, capture_output=True, timeout=300, env={**os.environ, **ENV})
    return out


def _compare(models: Path, b: str, out: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict[str, Any]]:
    proc = run_cli("compare", str(models / "ckpt"), str(models / b), "--out", str(out), "--onednn", "off", *args,
                   env=ENV)
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    return proc, json.loads((out / "report.json").read_text(encoding="utf-8"))


def test_a_difference_inside_the_map_fn_body_is_isolated_by_replaying_the_loop(map_models: Path,
                                                                                tmp_path: Path) -> None:
    proc, report = _compare(map_models, "export_variant", tmp_path)
    first = report["first_divergence"]
    assert (first["node"], first["op"]) == (GATHER, "TensorArrayGatherV3")
    assert report["first_divergence_beyond_tolerance"]["node"] == GATHER
    assert [o["node"] for o in report["origins"]] == [GATHER]
    assert report["nodes"][DENSE]["status"] == "identical" and report["nodes"][FLOW_EXIT]["status"] == "identical"
    isolation = first["isolation"]
    assert isolation["verdict"] == "own_error", isolation
    assert isolation["detail"].startswith(
        "given identical inputs, B's while loop that filled its TensorArray (replayed whole: a session cannot fetch "
        "the ops inside a loop) differs from A's by up to ")
    assert isolation["noise_max_abs"] == 0.0  # A's replay recomputed A's own result: the loop ran, from x
    assert isolation_words("own_error", loop="that filled its TensorArray", sep=": ") in " ".join(proc.stdout.split())
    # the changed constant inside the loop body is what the replay ran: the origin's rewrite, and the answer
    assert isolation["rewritten"] == [{"op": "map/while/mul/y", "kind": "const_changed"}]
    assert first["rewrite"] == "const_changed" and report["answers"]["causes"] == ["weights"]
    assert "1 weight differs between A and B (`map/while/mul/y`)" in report["answers"]["why"][0]


def test_a_difference_before_the_loop_propagates_through_the_gather(map_models: Path, tmp_path: Path) -> None:
    """The gather's own inputs (the loop's Exit, the indices) agree, but its data came from a
    loop whose input already differed: it propagates, never an origin."""
    _proc, report = _compare(map_models, "export_fp16", tmp_path, "--isolate", "0")
    assert report["first_divergence"]["node"] == DENSE
    assert [o["node"] for o in report["origins"]] == [DENSE]
    assert report["nodes"][GATHER]["status"] == "propagated"
    assert report["nodes"][FLOW_EXIT]["status"] == "identical"


def test_with_tf2_control_flow_the_tensor_list_stack_is_isolated_with_its_functional_loop(map_models: Path,
                                                                                          tmp_path: Path) -> None:
    """TF2's map_fn carries its rows in TensorLists (variants, never captured nor fed) through a
    functional While, lowered as TensorFlow runs it (tracer/artifacts/lowering.py): the replay of the
    stack after it reruns the loop from its inputs."""
    proc, report = _compare(map_models / "cf2", "export_variant", tmp_path)
    first = report["first_divergence"]
    assert (first["node"], first["op"]) == ("map/TensorArrayV2Stack/TensorListStack", "TensorListStack")
    assert [o["node"] for o in report["origins"]] == [first["node"]]
    assert first["isolation"]["verdict"] == "own_error", first["isolation"]
    assert first["isolation"]["detail"].startswith("given identical inputs, B's while loop that filled its TensorList "
                                                   "(replayed whole: a session cannot fetch the ops inside a loop)")
    assert isolation_words("own_error", loop="that filled its TensorList", sep=": ") in " ".join(proc.stdout.split())
    # the loop body lowered: its changed constant is a weight of the replay, at its node, as with TF1's loop (it was
    # an attr_changed of the functional While, blamed on the export)
    assert first["isolation"]["rewritten"] == [{"op": "map/while/body/_1/mul/y", "kind": "const_changed"}]
    assert first["rewrite"] == "const_changed" and report["answers"]["causes"] == ["weights"]
    assert "1 weight differs between A and B (`map/while/body/_1/mul/y`)" in report["answers"]["why"][0]


# The CLI with the replay plan as it was before TensorArray flows were known: the loop's Exit
# fed to the replay, which then reads a freshly created, empty TensorArray.
FLOWS_FED = """
import sys
from tracer.opgraph import OpGraph
OpGraph.tensor_array_flows = lambda self: frozenset()
from tracer.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_replay_tensorflow_refuses_is_judged_not_replayed_and_the_report_is_kept(map_models: Path,
                                                                                   tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", FLOWS_FED, "compare", str(map_models / "ckpt"), str(map_models / "export_variant"),
         "--out", str(tmp_path), "--onednn", "off"],
        cwd=REPO, env={**os.environ, **ENV, "COLUMNS": "200"}, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    report = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    isolation = report["first_divergence"]["isolation"]
    assert report["first_divergence"]["node"] == GATHER and isolation["verdict"] == "not_replayed"
    assert isolation["max_abs"] is None and isolation["command"] is None
    sides = isolation["detail"].split("; side B's replay failed: ")
    assert len(sides) == 2 and sides[0].startswith("side A's replay failed: InvalidArgumentError: ")
    for reason in (sides[0], sides[1]):
        assert "Could not read from TensorArray index 0" in reason
    shown = " ".join(proc.stdout.split())
    assert f"{GATHER} (TensorArrayGatherV3)" in shown
    assert f"{isolation_words('not_replayed', sep=': ')} (side A's replay failed: InvalidArgumentError: " in shown
    markdown = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "Not replayed: TensorFlow could not run it alone on identical inputs" in markdown


def test_a_split_capture_computes_a_tensor_array_again_rather_than_feed_its_flow(map_models: Path,
                                                                                 tmp_path: Path) -> None:
    """Split so the gather's part comes after the loop's: fed the loop's flow (its Exit), the part would
    skip the writes and read the TensorArray it creates anew, empty ("Could not read from TensorArray
    index 0": the gather was left uncaptured). The flow and the TensorArray ops are computed again and
    re-checked instead; what the part is fed is data (the dense layer, the ranges)."""
    whole, split = tmp_path / "whole", tmp_path / "split"
    for out, extra in ((whole, ()), (split, ("--max-memory", "800"))):
        proc = run_cli("capture", str(map_models / "savedmodel"), "--out", str(out), "--onednn", "off", *extra, env=ENV)
        assert proc.returncode == 0, proc.stderr
    manifest = json.loads((split / "manifest.json").read_text())
    assert manifest["fetch_chunks"] == 2
    assert manifest["fetch_parts"] == {"fed": 4, "rechecked": 4, "differed": [], "unfed_parts": 0}
    assert f"{GATHER}:0" not in manifest["uncaptured"] and "y:0" not in manifest["uncaptured"]
    from tracer.captures.reader import Capture  # noqa: PLC0415

    a, b = Capture.open(whole), Capture.open(split)
    assert a.tensor_names == b.tensor_names
    for name in (f"{GATHER}:0", "y:0", f"{FLOW_EXIT}:0"):
        assert a.tensor(name).tobytes() == b.tensor(name).tobytes(), name

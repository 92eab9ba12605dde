"""Which tensors an isolation replay feeds, and what a failed replay leaves, on hand-built
graphs and jobs (fast, no TensorFlow).

A rewrite group (a folded batch norm, a fused chain) is replayed whole from its own data inputs
on both sides; feeding A's pre-fold conv output into B's bias add compared a scaled convolution
with an unscaled one (an "own error" of 2.14 where the fold changed 4e-6). An op whose replay
recomputes a while loop above it (nothing between them compared) is said to differ with that
loop, not by its own kernel: a Keras LSTM's StridedSlice of its last step was called a
StridedSlice "whose own kernel differs". A read of a variable the graph writes on every run (a
Keras random layer's seed) is the model's state, not a kernel and not nondeterminism. A
TensorArray's flow is never fed: a TF1 ``tf.map_fn``'s gather is replayed with the loop that
fills it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tracer.artifacts.loader import ArtifactRef
from tracer.captures.launcher import ChildCrashed
from tracer.captures.replay_records import failure, record_failure, record_value, replay_path
from tracer.comparison import isolate
from tracer.comparison.align import ROLE_COMPARED, ROLE_REWRITTEN, Alignment, NodeAlignment, TensorPair
from tracer.comparison.replay_plan import (group_members, loop_above, origin_feeds, reads_variable, replay_plan,
                                           variable_writes)
from tracer.comparison.isolate import read_plan
from tracer.comparison.isolation_plan import RECEIVED_FIX, IsolationPlan, PlannedOrigin
from tracer.comparison.judge import judge as judge_planned
from tracer.comparison.statuses import isolation_words
from tracer.errors import TftraceError
from tracer.opgraph import OpGraph
from tracer.runspec import Side


def judge(ra: Any, rb: Any, entry: dict[str, Any], *captures: Any) -> Any:
    """The judge on an origin given as its entry of isolation_index.json reads (missing fields at
    the defaults a report made before them gets), checked as a received index is."""
    planned = PlannedOrigin.from_json({"id": 0, "node": entry["a_tensor"].split(":")[0], **entry}, "the index")
    return judge_planned(ra, rb, planned, *captures)


def _graph(chain: list[tuple[str, str, list[str]]], output: str) -> OpGraph:
    nodes = [
        {"name": name, "op": op, "device": "", "scope": "", "attrs": {}, "inputs": [f"{i}:0" for i in inputs],
         "control_inputs": [], "outputs": [{"dtype": "float32", "shape": [4], "capturable": True, "reason": ""}]}
        for name, op, inputs in chain
    ]
    return OpGraph.from_json({"inputs": {"x": "x:0"}, "outputs": {"y": f"{output}:0"}, "nodes": nodes})


def _node(a: str, b: str | None, role: str = ROLE_COMPARED, rewrite: str | None = None) -> NodeAlignment:
    tensors = [TensorPair(f"{a}:0", b, "name", True)] if b else []
    return NodeAlignment(a, b.split(":")[0] if b else None, "name", role, tensors, rewrite=rewrite)


def _to_a(alignment: Alignment) -> dict[str, dict[str, str]]:
    """As isolate_origins builds it: every comparable pair, on each side."""
    return {"a": {p.a: p.a for n in alignment.nodes.values() for p in n.tensors if p.comparable},
            "b": alignment.b_to_a()}


# A: x -> conv(w) -> FusedBatchNorm(gamma) -> relu;  B (optimize_for_inference): x -> conv(w_folded) -> BiasAdd(offset) -> relu
FOLD_A = _graph([("x", "Placeholder", []), ("w", "Const", []), ("gamma", "Const", []),
                 ("conv", "Conv2D", ["x", "w"]), ("bn", "FusedBatchNormV3", ["conv", "gamma"]),
                 ("relu", "Relu", ["bn"])], "relu")
FOLD_B = _graph([("x", "Placeholder", []), ("w_folded", "Const", []), ("offset", "Const", []),
                 ("conv", "Conv2D", ["x", "w_folded"]), ("bn", "BiasAdd", ["conv", "offset"]),
                 ("relu", "Relu", ["bn"])], "relu")
FOLD = Alignment({
    "x": _node("x", "x:0"),
    "w": _node("w", "w_folded:0", ROLE_REWRITTEN, "batchnorm_folded"),
    "gamma": _node("gamma", None, ROLE_REWRITTEN, "batchnorm_folded"),
    "conv": _node("conv", "conv:0", ROLE_REWRITTEN, "batchnorm_folded"),  # paired to be shown, not judged
    "bn": _node("bn", "bn:0", rewrite="batchnorm_folded"),
    "relu": _node("relu", "relu:0"),
}, [])


def test_a_folded_batch_norm_is_replayed_from_the_convs_input_on_both_sides() -> None:
    assert sorted(group_members(FOLD, FOLD_A, "bn")) == ["conv", "gamma", "w"]
    feeds, group = origin_feeds(FOLD, {"a": FOLD_A, "b": FOLD_B}, "bn", {"a": "bn:0", "b": "bn:0"}, _to_a(FOLD))
    assert feeds == {"a": {"x:0": "x:0"}, "b": {"x:0": "x:0"}}  # never A's conv:0 or A's unscaled weights
    assert group == {"kind": "batchnorm_folded", "a_members": group["a_members"], "a_inputs": ["x:0"],
                     "b_inputs": ["x:0"]}


def test_an_op_after_the_fold_is_fed_the_folds_output_as_before() -> None:
    assert group_members(FOLD, FOLD_A, "relu") == []
    feeds, group = origin_feeds(FOLD, {"a": FOLD_A, "b": FOLD_B}, "relu", {"a": "relu:0", "b": "relu:0"},
                                _to_a(FOLD))
    assert feeds == {"a": {"bn:0": "bn:0"}, "b": {"bn:0": "bn:0"}} and group is None


def test_a_fused_chain_named_after_its_first_op_is_replayed_whole() -> None:
    """B's fused op carries the conv's name (so the conv pairs with it by name) and stands for
    A's conv -> bias -> relu: the replay must not feed B anything of the chain."""
    a = _graph([("x", "Placeholder", []), ("w", "Const", []), ("conv", "Conv2D", ["x", "w"]),
                ("bias", "BiasAdd", ["conv", "w"]), ("relu", "Relu", ["bias"]), ("out", "Identity", ["relu"])], "out")
    b = _graph([("x", "Placeholder", []), ("w", "Const", []), ("conv", "_FusedConv2D", ["x", "w"]),
                ("out", "Identity", ["conv"])], "out")
    alignment = Alignment({
        "x": _node("x", "x:0"), "w": _node("w", "w:0"),
        "conv": _node("conv", "conv:0", ROLE_REWRITTEN, "fused"),
        "bias": _node("bias", None, ROLE_REWRITTEN, "fused"),
        "relu": _node("relu", "conv:0", rewrite="fused"),
        "out": _node("out", "out:0"),
    }, [])
    assert group_members(alignment, a, "relu") == ["bias", "conv"]
    feeds, group = origin_feeds(alignment, {"a": a, "b": b}, "relu", {"a": "relu:0", "b": "conv:0"},
                                _to_a(alignment))
    assert feeds == {"a": {"x:0": "x:0", "w:0": "w:0"}, "b": {"x:0": "x:0", "w:0": "w:0"}}
    assert group is not None and group["kind"] == "fused"


# A Keras LSTM, as inlined: the loop's outputs stacked time-major (not compared across batch
# sizes), then the last step sliced out; the loop itself is out of a session's reach.
LSTM = _graph([("x", "Placeholder", []), ("enter", "Enter", ["x"]), ("merge", "Merge", ["enter"]),
               ("switch", "Switch", ["merge"]), ("exit", "Exit", ["switch"]), ("stack", "TensorListStack", ["exit"]),
               ("last", "StridedSlice", ["stack"]), ("y", "Identity", ["last"])], "y")


def test_an_op_replayed_with_the_while_loop_above_it_names_the_loop() -> None:
    assert loop_above(LSTM, "last:0", {"x:0": "x:0"}) == "exit"
    assert loop_above(LSTM, "last:0", {"stack:0": "stack:0"}) is None  # the stack was compared: fed, no loop
    assert loop_above(LSTM, "exit:0", {"x:0": "x:0"}) is None  # an Exit origin is the loop itself
    assert loop_above(LSTM, "y:0", {"last:0": "last:0"}) is None


def test_a_difference_in_a_replay_that_ran_a_loop_is_not_called_the_ops_own_kernel() -> None:
    op = {"a_tensor": "last:0", "b_tensor": "last:0", "a_op": "StridedSlice", "b_op": "StridedSlice", "loop": "exit"}
    result = judge(np.array([1.0, 2.0], np.float32), np.array([1.0, 2.5], np.float32), op, None)
    assert (result.verdict, result.loop, result.max_abs) == ("own_error", "exit", 0.5)
    assert result.detail == (
        "given identical inputs, B's StridedSlice, with the while loop above it (ending at `exit`, replayed whole: "
        "a session cannot fetch the ops inside a loop, and nothing between them was compared), differs from A's by "
        "up to 0.5 (rel 0.2, rel L2 0.224)")
    assert result.to_json()["loop"] == "exit"
    alone = judge(np.array([1.0, 2.0], np.float32), np.array([1.0, 2.5], np.float32), {**op, "loop": None}, None)
    assert alone.detail.startswith("given identical inputs, B's StridedSlice kernel differs from A's by up to 0.5")


def _typed(nodes: list[tuple[str, str, list[str], str]], output: str) -> OpGraph:
    """A graph whose ops output one tensor each, of the given dtype."""
    return OpGraph.from_json({"inputs": {"x": "x:0"}, "outputs": {"y": f"{output}:0"}, "nodes": [
        {"name": name, "op": op, "device": "", "scope": "", "attrs": {}, "inputs": [f"{i}:0" for i in inputs],
         "control_inputs": [], "outputs": [{"dtype": dtype, "shape": [2], "capturable": dtype != "resource",
                                            "reason": ""}]}
        for name, op, inputs, dtype in nodes]})


# A Keras RandomFlip, inlined: its seed state reached through an Identity of the handle, read,
# advanced and written back; the flip itself reads a weight nothing writes.
SEEDED = _typed([("seed", "VarHandleOp", [], "resource"), ("seed_in", "Identity", ["seed"], "resource"),
                 ("read", "ReadVariableOp", ["seed_in"], "int64"), ("one", "Const", [], "int64"),
                 ("next", "AddV2", ["read", "one"], "int64"), ("assign", "AssignVariableOp", ["seed_in", "next"], "int64"),
                 ("w", "VarHandleOp", [], "resource"), ("w_in", "Identity", ["w"], "resource"),
                 ("w_read", "ReadVariableOp", ["w_in"], "float32"), ("x", "Placeholder", [], "float32"),
                 ("y", "Mul", ["x", "w_read"], "float32")], "y")


def test_the_writers_of_a_variable_read_through_an_inlined_identity_are_found() -> None:
    assert variable_writes(SEEDED, "read") == ["assign"]
    assert variable_writes(SEEDED, "seed") == ["assign"]
    assert variable_writes(SEEDED, "w_read") == []  # a weight nothing writes
    assert variable_writes(SEEDED, "next") == []  # computed from the state, not a read of it
    assert (reads_variable(SEEDED, "read"), reads_variable(SEEDED, "w_read"), reads_variable(SEEDED, "y")) == (
        True, True, False)


class _Captured:
    """A side's capture holding one tensor."""

    def __init__(self, name: str, value: np.ndarray) -> None:
        self.name, self.value = name, value

    def has(self, name: str) -> bool:
        return name == self.name

    def tensor(self, name: str) -> np.ndarray:
        return self.value


def test_a_read_of_the_models_own_state_is_state_not_nondeterminism() -> None:
    """Both replays read the seed as loaded ([7, 0]); A's run read it after 9 earlier runs, B's after 2."""
    op = {"a_tensor": "read:0", "b_tensor": "read:0", "a_op": "ReadVariableOp", "b_op": "ReadVariableOp",
          "inputs_identical": True, "reads_variable": True, "writes": ["assign"]}
    loaded = np.array([7, 0], np.int64)
    result = judge(loaded, loaded.copy(), op, _Captured("read:0", np.array([16, 0], np.int64)),
                   _Captured("read:0", np.array([9, 0], np.int64)))
    assert (result.verdict, result.writes, result.load_state, result.max_abs, result.noise_max_abs) == (
        "state", ["assign"], False, 0.0, 9.0)
    assert result.detail == (
        "the variable is the model's own state: the graph writes it on every run (`assign`), so a run reads what the "
        "runs before it left. Replayed in fresh processes, both sides read the same value, but A's replay differs "
        "from A's captured value by up to 9; B's replay differs from B's captured value by up to 2: the sides' "
        "earlier runs left different states (a different number of runs, or other inputs, before the ones "
        "captured). No kernel, input or export makes this difference")
    unwritten = judge(loaded, loaded.copy(), {**op, "writes": []}, _Captured("read:0", np.array([16, 0], np.int64)))
    assert (unwritten.verdict, unwritten.load_state) == ("nondeterministic", True)  # set at load, as before



def test_a_read_of_a_variable_the_runs_write_whose_loaded_values_differ_is_the_weights_not_the_load() -> None:
    """A training graph's moving mean, restored as -0.1 in A and 0.4 in B, updated by every run: each
    replay reads it as loaded and differs from what its runs left; the sides load other values."""
    op = {"a_tensor": "read:0", "b_tensor": "read:0", "a_op": "ReadVariableOp", "b_op": "ReadVariableOp",
          "inputs_identical": True, "reads_variable": True, "writes": ["assign"], "weight": "moving_mean"}
    result = judge(np.array([-0.1], np.float32), np.array([0.4], np.float32), op,
                   _Captured("read:0", np.array([0.2], np.float32)), _Captured("read:0", np.array([0.3], np.float32)))
    assert (result.verdict, result.load_state) == ("weights_differ", False)
    assert result.detail.startswith("the values A and B load into the variable `moving_mean`, which this op reads, "
                                    "differ by up to 0.5")


# A batch norm in training mode (is_training=True) replayed on identical rows, its two replays apart.
BATCH_NORM = {"a_tensor": "bn:0", "b_tensor": "bn:0", "a_op": "FusedBatchNormV3", "b_op": "FusedBatchNormV3",
              "inputs_identical": True}
NORMALISED = (np.array([0.5, -1.0], np.float32), np.array([0.25, -1.0], np.float32))


def test_a_batch_norm_in_training_mode_over_other_batches_is_its_batch_statistics_not_its_kernel() -> None:
    result = judge(*NORMALISED, {**BATCH_NORM, "batch_statistics": ["a", "b"], "batched_alike": False}, None)
    assert (result.verdict, result.max_abs) == ("batch_statistics", 0.25)
    assert result.detail == (
        "the sides batch the examples differently, and both sides' FusedBatchNormV3 normalise each row with the "
        "statistics of the batch it runs in (is_training=True): fed the same rows, the replays differ by up to 0.25 "
        "(rel 0.5, rel L2 0.224), as each row's output depends on the rows that share its batch (the training "
        "graph's batch statistics)")
    assert "kernel differs" not in result.detail
    assert isolation_words(result.verdict) == (
        "batch statistics — fed identical rows, the op alone still differs: it is computed from statistics over the "
        "batch it runs in (a batch norm in training mode, or a reduction over the batch axis), which the sides do not "
        "share; not its kernel")
    one_side = judge(*NORMALISED, {**BATCH_NORM, "batch_statistics": ["a"], "batched_alike": True}, None)
    assert (one_side.verdict, one_side.detail.split(":")[0]) == ("batch_statistics", (
        "A's FusedBatchNormV3 normalises each row with the statistics of the batch it runs in (is_training=True), "
        "B's with its moving averages (is_training=False)"))


def test_a_batch_norm_in_training_mode_over_the_same_batches_still_has_its_own_error() -> None:
    """Both sides normalise the very same batches: then only the kernel is left to differ."""
    same = judge(*NORMALISED, {**BATCH_NORM, "batch_statistics": ["a", "b"], "batched_alike": True}, None)
    assert same.verdict == "own_error"
    older = judge(*NORMALISED, BATCH_NORM, None)  # an index from before the fields: judged as it was
    assert older.verdict == "own_error"
    inference = judge(*NORMALISED, {**BATCH_NORM, "batched_alike": False}, None)  # is_training=False on both
    assert inference.verdict == "own_error"

# A TF1 tf.map_fn (control flow v1) as the graph holds it: the input unstacked into a TensorArray
# (scatter), a loop that reads each row and writes its result into another TensorArray, and after
# the loop a gather whose flow input is the loop's Exit. Every tensor outside the loop is captured.
def _map_fn_graph() -> OpGraph:
    def node(name: str, op: str, inputs: list[str], outputs: tuple[str, ...] = ("float32",)) -> dict:
        return {"name": name, "op": op, "device": "", "scope": "", "attrs": {}, "inputs": inputs,
                "control_inputs": [], "outputs": [{"dtype": d, "shape": None, "capturable": d == "float32",
                                                   "reason": ""} for d in outputs]}
    array = ("resource", "float32")  # TensorArrayV3: handle, flow
    return OpGraph.from_json({"inputs": {"x": "x:0"}, "outputs": {"y": "y:0"}, "nodes": [
        node("x", "Placeholder", []), node("size", "Const", []), node("rows", "Const", []),
        node("ta_in", "TensorArrayV3", ["size:0"], array),
        node("scatter", "TensorArrayScatterV3", ["ta_in:0", "rows:0", "x:0", "ta_in:1"]),
        node("ta_out", "TensorArrayV3", ["size:0"], array),
        node("i0", "Const", []),
        node("enter_i", "Enter", ["i0:0"]), node("enter_flow", "Enter", ["ta_out:1"]),
        node("enter_n", "Enter", ["size:0"]),
        node("merge_i", "Merge", ["enter_i:0", "next_i:0"]), node("merge_flow", "Merge", ["enter_flow:0", "next_flow:0"]),
        node("less", "Less", ["merge_i:0", "enter_n:0"]), node("cond", "LoopCond", ["less:0"]),
        node("switch_i", "Switch", ["merge_i:0", "cond:0"]), node("switch_flow", "Switch", ["merge_flow:0", "cond:0"]),
        node("i", "Identity", ["switch_i:1"]), node("flow", "Identity", ["switch_flow:1"]),
        node("read_handle", "Enter", ["ta_in:0"], ("resource",)), node("read_flow", "Enter", ["scatter:0"]),
        node("read", "TensorArrayReadV3", ["read_handle:0", "i:0", "read_flow:0"]),
        node("body", "Relu", ["read:0"]),
        node("write_handle", "Enter", ["ta_out:0"], ("resource",)),
        node("write", "TensorArrayWriteV3", ["write_handle:0", "i:0", "body:0", "flow:0"]),
        node("add", "AddV2", ["i:0", "i:0"]),
        node("next_i", "NextIteration", ["add:0"]), node("next_flow", "NextIteration", ["write:0"]),
        node("exit_flow", "Exit", ["switch_flow:0"]),
        node("gather", "TensorArrayGatherV3", ["ta_out:0", "rows:0", "exit_flow:0"]),
        node("y", "Identity", ["gather:0"]),
    ]})


MAP_FN = _map_fn_graph()
OUTSIDE_THE_LOOP = ["x:0", "size:0", "rows:0", "ta_in:1", "scatter:0", "ta_out:1", "i0:0", "exit_flow:0", "gather:0",
                    "y:0"]


def test_the_flows_of_a_map_fns_tensor_arrays_are_found_through_the_loop_frame() -> None:
    assert MAP_FN.tensor_array_flows() == {
        "ta_in:1", "scatter:0", "read_flow:0",  # the input's: unstacked, then read inside the loop
        "ta_out:1", "enter_flow:0", "merge_flow:0", "switch_flow:0", "switch_flow:1", "flow:0", "next_flow:0",
        "write:0", "exit_flow:0",  # the result's: written inside the loop, gathered after its Exit
    }


def test_replaying_a_tensor_array_gather_reruns_the_loop_that_fills_it_from_the_loops_inputs() -> None:
    """Feeding the Exit (the gather's flow) skipped the loop: the replay read a freshly created,
    empty TensorArray ("Could not read from TensorArray index 0"). Feeding the scatter's flow
    skipped the unstack the same way. Only the loop's data inputs are fed."""
    captured = {t: t for t in OUTSIDE_THE_LOOP}
    assert replay_plan(MAP_FN, "gather:0", captured) == {"x:0": "x:0", "size:0": "size:0", "rows:0": "rows:0",
                                                         "i0:0": "i0:0"}
    assert replay_plan(MAP_FN, "y:0", captured) == {"gather:0": "gather:0"}  # after the loop: as before


def _job(tmp_path: Path) -> dict:
    return {"side": Side(ArtifactRef("model")).to_json(), "out_dir": str(tmp_path / "isolation_b"),
            "ops": [{"id": 0, "fetch": "gather:0", "feeds": {}}, {"id": 1, "fetch": "y:0", "feeds": {}}]}


def test_a_crashed_replay_child_costs_the_verdicts_of_the_ops_it_had_not_answered(monkeypatch, tmp_path: Path) -> None:
    """A replay is an extra: a child that dies without a user error leaves a failure record for
    each op it had not answered (judged ``not_replayed``), and the comparison keeps its report."""
    def crash(job: dict, side: Side, **_: object) -> None:
        Path(replay_path(job["out_dir"], 1)).parent.mkdir(parents=True)
        Path(replay_path(job["out_dir"], 1)).write_bytes(b"")  # op 1 was answered before the crash
        raise ChildCrashed("the child process running isolate 2 op(s) [cpu] exited with 4", "fix it",
                           reason="its child process exited with 4 (SystemError: planted)")

    monkeypatch.setattr(isolate, "run_child", crash)
    job = _job(tmp_path)
    isolate.run_job(job, allow_unsafe_ops=False)
    assert failure(job["out_dir"], 0) == "its child process exited with 4 (SystemError: planted)"
    assert failure(job["out_dir"], 1) is None


def test_a_user_error_in_a_replay_child_is_still_an_error(monkeypatch, tmp_path: Path) -> None:
    """A refused unsafe model or a report made from another model has a fix: it stays exit 2."""
    def refuse(job: dict, side: Side, **_: object) -> None:
        raise TftraceError("the model runs ops outside the computation (WriteFile)", "pass --allow-unsafe-ops")

    monkeypatch.setattr(isolate, "run_child", refuse)
    job = _job(tmp_path)
    with pytest.raises(TftraceError) as info:
        isolate.run_job(job, allow_unsafe_ops=False)
    assert not isinstance(info.value, ChildCrashed)
    assert failure(job["out_dir"], 0) is None and failure(job["out_dir"], 1) is None


def test_a_replay_record_replaces_what_an_earlier_run_left_and_never_reads_through_a_link(tmp_path: Path) -> None:
    """``tftrace isolate --from`` may run a side again into the same directory, which came with
    a received report: the newer answer holds, and a planted link is never followed."""
    out = str(tmp_path)
    record_failure(out, 0, "InvalidArgumentError: Could not read from\n TensorArray index 0")
    assert failure(out, 0) == "InvalidArgumentError: Could not read from TensorArray index 0"
    record_value(out, 0, b"npy")
    assert failure(out, 0) is None and Path(replay_path(out, 0)).read_bytes() == b"npy"
    record_failure(out, 0, "killed")
    assert failure(out, 0) == "killed" and not Path(replay_path(out, 0)).exists()
    secret = tmp_path / "secret.txt"
    secret.write_text('{"reason": "a file of the machine running tftrace isolate"}', encoding="utf-8")
    (tmp_path / "1.failed.json").symlink_to(secret)
    assert failure(out, 1) == "its failure record is not a plain file"


# ---- the plan as a received report directory holds it (work/isolation_index.json)

ENTRY = {"id": 3, "node": "conv", "a_tensor": "conv:0", "b_tensor": "conv_1:0", "a_op": "Conv2D", "b_op": "Conv2D",
         "inputs_identical": True, "reads_variable": False, "writes": [], "weight": None,
         "executed": {"a": ["_FusedConv2D"], "b": None}, "same_settings": True, "same_settings_but_build": True,
         "per_process": ["b"], "repeat_noise": "inf", "same_op_same_settings": False, "loop": None,
         "rewritten": [{"op": "conv", "kind": "cast_inserted"}],
         "group": {"kind": "batchnorm_folded", "a_members": ["bn"], "a_inputs": ["x:0"], "b_inputs": ["x:0"]},
         "batch_statistics": ["a"], "batched_alike": False,
         "detections": {"output": "detection_boxes", "box_format": "yxyx", "iou_threshold": 0.5,
                        "roles": {"boxes": {"id": 3, "a_tensor": "conv:0", "b_tensor": "conv_1:0"},
                                  "scores": {"id": 4, "a_tensor": "scores:0", "b_tensor": "scores:0"}}}}


def test_a_planned_origin_reads_back_as_written() -> None:
    planned = PlannedOrigin.from_json(ENTRY, "the index")
    assert planned.repeat_noise == float("inf") and planned.per_process == ("b",)
    assert planned.executed == {"a": ["_FusedConv2D"], "b": None} and planned.group["a_members"] == ["bn"]
    assert (planned.batch_statistics, planned.batched_alike) == (("a",), False)
    assert planned.detections["roles"]["scores"] == {"id": 4, "a_tensor": "scores:0", "b_tensor": "scores:0"}
    assert PlannedOrigin.from_json(planned.to_json(), "again") == planned


def test_an_index_from_an_older_report_is_judged_with_the_defaults_it_was_judged_with() -> None:
    old = {k: ENTRY[k] for k in ("id", "node", "a_tensor", "b_tensor", "b_op", "same_settings")}
    planned = PlannedOrigin.from_json(old, "the index")
    assert (planned.a_op, planned.repeat_noise, planned.writes, planned.group) == (None, None, (), None)
    assert (planned.batch_statistics, planned.batched_alike, planned.detections) == ((), None, None)
    assert planned.alike_but_build is True  # same_settings stands for the build-blind setting it predates


@pytest.mark.parametrize(("field", "value", "says"), [
    ("writes", "assign", "the index, op 0's 'writes' is not a list of strings: 'assign'"),
    ("id", True, "the index, op 0's 'id' is not an integer: 'True'"),
    ("executed", {"c": ["MatMul"]}, "the index, op 0's 'executed' is not a map of side to kernel names"),
    ("group", {"kind": "fused", "a_members": []}, "the index, op 0's 'group' is not a rewrite group"),
    ("repeat_noise", "lots", "the index, op 0's 'repeat_noise' is not a number: 'lots'"),
    ("batch_statistics", "a", "the index, op 0's 'batch_statistics' is not a list of strings: 'a'"),
    ("detections", {"output": "detection_boxes", "box_format": "yxyx", "iou_threshold": 0.5,
                    "roles": {"boxes": {"id": "3", "a_tensor": "conv:0", "b_tensor": "conv_1:0"}}},
     "the index, op 0's 'detections' is not lists of detections"),
])
def test_a_tampered_index_is_refused_naming_the_field(field: str, value: Any, says: str) -> None:
    with pytest.raises(TftraceError) as caught:
        IsolationPlan.from_json({"ops": [{**ENTRY, field: value}]}, "the index")
    assert caught.value.problem.startswith(says)
    assert caught.value.fix == RECEIVED_FIX


def test_an_index_missing_a_required_field_or_not_an_index_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TftraceError, match="op 0 has no 'b_op'"):
        IsolationPlan.from_json({"ops": [{k: v for k, v in ENTRY.items() if k != "b_op"}]}, "the index")
    (tmp_path / "isolation_index.json").write_text('{"ops": {}}', encoding="utf-8")
    with pytest.raises(TftraceError, match="is not an isolation index"):
        read_plan(str(tmp_path))
    (tmp_path / "isolation_index.json").write_text('{"ops": [NaN]}', encoding="utf-8")
    with pytest.raises(TftraceError, match="cannot read"):
        read_plan(str(tmp_path))


def test_a_gpu_origin_whose_further_whole_runs_repeated_it_is_not_called_run_to_run_noise() -> None:
    """Run t on the H200 (training checkpoint, batch 1 vs 8): both replays of `conv1/Conv2D` agree,
    B's replay differs from B's capture by 1.06e-3, and B is a GPU side (its kernels may change per
    process). Judged on that alone it is `nondeterministic`, "the difference is run-to-run
    nondeterminism"; but B's two further whole runs (judging's) repeated the op bit for bit, so that
    is not shown: it is `not_reproduced`, the op computing otherwise alone than inside the model."""
    op = {"a_tensor": "conv:0", "b_tensor": "conv:0", "a_op": "Conv2D", "b_op": "Conv2D", "inputs_identical": True,
          "per_process": ["a", "b"], "repeat_noise": 0.0}
    replay = np.array([1.0, 2.0], np.float32)
    captured_b = _Captured("conv:0", np.array([1.0, 2.00106], np.float32))
    before = judge(replay, replay.copy(), op, _Captured("conv:0", replay.copy()), captured_b)
    assert (before.verdict, before.replay_moved, before.repeated) == ("nondeterministic", ["b"], False)
    assert "the difference is run-to-run nondeterminism" in before.detail
    after = judge(replay, replay.copy(), {**op, "repeated": ["b"]}, _Captured("conv:0", replay.copy()), captured_b)
    assert (after.verdict, after.replay_moved, after.repeated) == ("not_reproduced", ["b"], True)
    assert after.detail.startswith(
        "replayed alone on identical inputs, both sides compute the same result, but B's replay differs from B's "
        "captured value by up to 0.00106, while B's whole-model runs, run more for this, repeated it bit for bit: "
        "alone in a fresh process the op computes other numbers than inside the whole model, where it did not change "
        "from run to run (the algorithm picked for it: cuDNN autotuning picks per process and context, which "
        "`--autotune off` tells)")
    # a CPU side (its kernels do not change per process): no autotuning to name
    on_cpu = judge(replay, replay.copy(), {**op, "per_process": [], "repeated": ["b"]},
                   _Captured("conv:0", replay.copy()), captured_b)
    assert on_cpu.verdict == "not_reproduced" and "(a rewrite at run time that the executed graph does not name)" in (
        on_cpu.detail) and "autotun" not in on_cpu.detail
    # the index written for a later `tftrace report` keeps the sides, and a received one is checked
    planned = PlannedOrigin.from_json({"id": 0, "node": "conv", **op, "repeated": ["b"]}, "the index")
    assert PlannedOrigin.from_json(planned.to_json(), "the index").repeated == ("b",)
    with pytest.raises(TftraceError, match="'repeated' is not a list of strings"):
        PlannedOrigin.from_json({"id": 0, "node": "conv", **op, "repeated": "b"}, "the index")

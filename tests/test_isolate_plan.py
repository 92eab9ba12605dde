"""Which tensors an isolation replay feeds, and what a failed replay leaves, on hand-built
graphs and jobs (fast, no TensorFlow).

A rewrite group (a folded batch norm, a fused chain) is replayed whole from its own data inputs
on both sides; feeding A's pre-fold conv output into B's bias add compared a scaled convolution
with an unscaled one (an "own error" of 2.14 where the fold changed 4e-6). A TensorArray's
flow is never fed: a TF1 ``tf.map_fn``'s gather is replayed with the loop that fills it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tracer.artifacts.loader import ArtifactRef
from tracer.captures.launcher import ChildCrashed
from tracer.captures.replay_records import failure, record_failure, record_value, replay_path
from tracer.comparison import isolate
from tracer.comparison.align import ROLE_COMPARED, ROLE_REWRITTEN, Alignment, NodeAlignment, TensorPair
from tracer.comparison.isolate import group_members, origin_feeds, replay_plan
from tracer.errors import TftraceError
from tracer.opgraph import OpGraph
from tracer.runspec import Side


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

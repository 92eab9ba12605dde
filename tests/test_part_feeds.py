"""The parts of a split fetch are fed what the parts before them fetched (tracer/captures/part_feeds.py).

On the H200 (2026-12-04) a part that computed its inputs again ran other kernels for them than the
part that stored them, and an unseeded random op upstream drew again in every part. Fed, a part
runs its own ops only, from the stored values."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli
from tracer.captures._packed import content_digest
from tracer.captures.part_feeds import BetweenParts, Part, plan_parts
from tracer.captures.reader import Capture
from tracer.opgraph import OpGraph


def _graph(nodes: list[tuple[str, str, list[str]]], output: str, control: dict[str, list[str]] | None = None) -> OpGraph:
    control = control or {}
    return OpGraph.from_json({"inputs": {"x": "x:0"}, "outputs": {"y": f"{output}:0"}, "nodes": [
        {"name": name, "op": op, "device": "", "scope": "", "attrs": {}, "inputs": [f"{i}:0" for i in inputs],
         "control_inputs": control.get(name, []),
         "outputs": [{"dtype": "float32", "shape": [4], "capturable": True, "reason": ""}]}
        for name, op, inputs in nodes]})


# x -> a -> b -> c -> d, with a skip from a to d; w is a weight read by c
CHAIN = _graph([("x", "Placeholder", []), ("w", "Const", []), ("a", "Relu", ["x"]), ("b", "Relu", ["a"]),
                ("c", "MatMul", ["b", "w"]), ("d", "AddV2", ["c", "a"])], "d")
NAMES = ["x:0", "w:0", "a:0", "b:0", "c:0", "d:0"]
SIZES = dict.fromkeys(NAMES, 100)


def _summary(parts: list[Part]) -> list[tuple[list[str], list[str], list[str], list[str]]]:
    return [(p.names, p.feeds, p.rechecks, p.release) for p in parts]


def test_everything_under_the_limit_is_one_part_fed_nothing() -> None:
    assert _summary(plan_parts(CHAIN, NAMES, SIZES, 600, lambda n: True, {"w"})) == [(NAMES, [], [], [])]


def _peaks(parts: list[Part], sizes: dict[str, int]) -> list[int]:
    """Bytes in memory while each part runs: its tensors, its re-checks, and the values fetched
    before it that it or a later part is fed."""
    peaks, fetched = [], set()
    for i, part in enumerate(parts):
        later = {n for p in parts[i:] for n in p.feeds}
        peaks.append(sum(sizes[n] for n in [*part.names, *part.rechecks, *(fetched & later)]))
        fetched |= set(part.names)
    return peaks


def test_each_part_is_fed_the_inputs_earlier_parts_fetched_and_releases_them_after_their_last_reader() -> None:
    """400 bytes: x w a b | c d. The second part is fed a (for d's skip) and b (for c), never the
    examples (fed to every part anyway) or a weight, and lets both go after it."""
    parts = plan_parts(CHAIN, NAMES, SIZES, 400, lambda n: True, {"w"})
    assert _summary(parts) == [
        (["x:0", "w:0", "a:0", "b:0"], [], [], []),
        (["c:0", "d:0"], ["a:0", "b:0"], [], ["a:0", "b:0"]),
    ]
    assert _peaks(parts, SIZES) == [400, 400]


def test_the_parts_are_cut_again_until_the_values_held_fit_beside_them() -> None:
    """300 bytes: the first cut (x w a | b c d) would hold a beside b c d (400); cut again, every part
    with the values held for it stays under 300, and the skip's a is held until d has run."""
    parts = plan_parts(CHAIN, NAMES, SIZES, 300, lambda n: True, {"w"})
    assert _summary(parts) == [
        (["x:0"], [], [], []), (["w:0"], [], [], []), (["a:0"], [], [], []),
        (["b:0"], ["a:0"], [], []),
        (["c:0"], ["b:0"], [], ["b:0"]),
        (["d:0"], ["a:0", "c:0"], [], ["a:0", "c:0"]),
    ]
    assert max(_peaks(parts, SIZES)) <= 300


def test_a_tensor_tensorflow_will_not_take_as_a_feed_is_computed_again_and_rechecked() -> None:
    """b is not feedable (a Merge's output, say): the part that reads it computes it again from a, which
    it is fed, and fetches b too, to compare its digest with the stored one; its bytes count."""
    parts = plan_parts(CHAIN, NAMES, SIZES, 400, lambda n: n != "b:0", {"w"})
    assert _summary(parts)[1] == (["c:0", "d:0"], ["a:0"], ["b:0"], ["a:0"])
    assert _peaks(parts, SIZES) == [400, 400]


def test_an_op_that_must_run_first_is_walked_through_like_an_input() -> None:
    """d waits for an assign (a control input) that reads b: the part running d is fed b for it."""
    graph = _graph([("x", "Placeholder", []), ("a", "Relu", ["x"]), ("b", "Relu", ["a"]),
                    ("assign", "AssignAdd", ["b"]), ("d", "Relu", ["a"])], "d", control={"d": ["assign"]})
    names = ["x:0", "a:0", "b:0", "d:0"]
    parts = plan_parts(graph, names, dict.fromkeys(names, 100), 300, lambda n: True)
    assert _summary(parts) == [(["x:0", "a:0", "b:0"], [], [], []), (["d:0"], ["a:0", "b:0"], [], ["a:0", "b:0"])]


def test_without_room_for_the_values_held_the_parts_compute_their_inputs_again() -> None:
    """100 bytes, every tensor 100: no part can hold a value for a later one, nor a re-check. Each
    later part computes its inputs from the examples, as a split fetch did before parts were fed."""
    parts = plan_parts(CHAIN, NAMES, SIZES, 100, lambda n: True, {"w"})
    assert [p.names for p in parts] == [[n] for n in NAMES]
    assert [(p.feeds, p.rechecks, p.unfed) for p in parts] == [([], [], False)] + [([], [], True)] * 5


def test_the_recheck_digest_tells_every_bit_and_strings_by_their_contents() -> None:
    zero = np.zeros(3, np.float32)
    assert content_digest(zero) == content_digest(zero.copy())
    assert content_digest(zero) != content_digest(-zero)  # -0.0: other bits
    assert content_digest(zero) != content_digest(zero.reshape(1, 3))
    assert content_digest(np.array([b"ab", b"c"], object)) == content_digest(np.array([b"ab", b"c"], object))
    assert content_digest(np.array([b"ab", b"c"], object)) != content_digest(np.array([b"a", b"bc"], object))


def test_between_parts_records_a_recheck_that_differs() -> None:
    class Step:
        feeds, rechecks, release, hold, digest, unfed = [], ["a:0"], [], frozenset(), frozenset({"a:0"}), False

    between = BetweenParts(graph=None)
    between.keep(Step, "a:0", np.ones(2, np.float32))
    assert between.rechecks(Step) == ["a:0"]
    between.check("a:0", np.ones(2, np.float32), 0, 2)
    between.check("a:0", np.full(2, 2, np.float32), 1, 3)
    assert between.record() == {"fed": 0, "rechecked": 1, "differed": [{"tensor": "a:0", "run": 1, "part": 3}],
                                "unfed_parts": 0}


@pytest.mark.slow
def test_a_split_capture_of_a_model_with_unseeded_dropout_holds_one_run(dropout_models: Path, tmp_path: Path) -> None:
    """The dropout's mask is drawn once per run, not once per part: what the capture stores for the
    mask's select is the stored random draw applied to the stored scaled activations, bit for bit, and
    the head's MatMul is that times the head's weights. Before parts were fed, the part holding the
    select drew its own mask (3 parts: the select matched the stored draw nowhere near everywhere)."""
    inputs = tmp_path / "features.npy"
    np.save(inputs, np.random.default_rng(3).normal(size=(4096, 32)).astype(np.float32))  # 1 MiB a [4096, 64] tensor
    out = tmp_path / "cap"
    proc = run_cli("capture", str(dropout_models / "savedmodel"), "--inputs", str(inputs), "--out", str(out),
                   "--onednn", "off", "--max-memory", "3200000")
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["fetch_chunks"] == 9  # cut again until the values held fit: 3 MiB tensors a part would not
    assert manifest["fetch_parts"] == {"fed": 8, "rechecked": 0, "differed": [], "unfed_parts": 0}
    assert ("fetched in 9 chunks to stay under --max-memory 3,200,000: each chunk is its own session.run, fed 8 "
            "values that earlier chunks fetched for its inputs, so it computes from what is stored") in manifest["notes"]
    cap = Capture.open(out)
    draw, scaled = cap.tensor("dropout/random_uniform/RandomUniform:0"), cap.tensor("dropout/Mul:0")
    select = cap.tensor("dropout/SelectV2:0")
    np.testing.assert_array_equal(select, np.where(draw >= 0.3, scaled, np.float32(0)))
    np.testing.assert_allclose(cap.tensor("MatMul_1:0"), select @ cap.tensor("MatMul_1/ReadVariableOp:0"),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_parts_cut_by_the_part_size_are_fed_and_hold_one_run(dropout_models: Path, tmp_path: Path) -> None:
    """The same model under the default --max-memory, cut by --part-bytes alone: the later parts are
    fed (nothing is computed again, so the mask is drawn once) and the values held beside a part are
    bounded by --max-memory, not by the part size, so the parts are not cut again for them."""
    inputs = tmp_path / "features.npy"
    np.save(inputs, np.random.default_rng(3).normal(size=(4096, 32)).astype(np.float32))
    out = tmp_path / "cap"
    proc = run_cli("capture", str(dropout_models / "savedmodel"), "--inputs", str(inputs), "--out", str(out),
                   "--onednn", "off", "--part-bytes", "3200000")
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["fetch_chunks"] < 9 and manifest["fetch_parts"]["unfed_parts"] == 0
    assert manifest["fetch_parts"]["fed"] > 0 and manifest["fetch_parts"]["differed"] == []
    cap = Capture.open(out)
    draw, scaled = cap.tensor("dropout/random_uniform/RandomUniform:0"), cap.tensor("dropout/Mul:0")
    np.testing.assert_array_equal(cap.tensor("dropout/SelectV2:0"), np.where(draw >= 0.3, scaled, np.float32(0)))


def test_a_fetch_set_is_cut_once_and_each_run_gets_its_own_copy() -> None:
    """Later runs fetch the same tensors: cut once (0.4 s a run on a RetinaNet), handed out as copies,
    so that putting the predicates in front of a run's first part leaves the next run's alone."""
    from types import SimpleNamespace  # noqa: PLC0415

    from tracer.captures.part_feeds import PartPlans  # noqa: PLC0415

    plan = SimpleNamespace(sizes=dict(SIZES), max_memory=400, constant={"w"}, part_limit=lambda: 400)
    cut = PartPlans(CHAIN, plan, lambda n: True)
    first = cut(NAMES)
    first[0].names = ["pred:0", *first[0].names]
    again = cut(NAMES)
    assert _summary(again) == _summary(plan_parts(CHAIN, NAMES, SIZES, 400, lambda n: True, {"w"}))
    assert len(cut.planned) == 1
    plan.sizes["c:0"] = 300  # measured larger in a run: cut anew
    assert _peaks(cut(NAMES), plan.sizes)[-1] <= 400 and len(cut.planned) == 2


def test_a_part_size_under_the_limit_cuts_there_and_bounds_the_held_values_by_the_limit() -> None:
    """--part-bytes 200 under a 600-byte limit: parts of two tensors, fed what they read; the values
    held beside a part may take it past 200 (up to the limit), so it is not cut again for them."""
    parts = plan_parts(CHAIN, NAMES, SIZES, 600, lambda n: True, {"w"}, target=200)
    assert _summary(parts) == [
        (["x:0", "w:0"], [], [], []),
        (["a:0", "b:0"], [], [], []),
        (["c:0", "d:0"], ["a:0", "b:0"], [], ["a:0", "b:0"]),
    ]
    assert _peaks(parts, SIZES) == [200, 200, 400]


def test_the_part_size_is_never_below_the_largest_tensor_nor_above_the_limit() -> None:
    from tracer.captures.fetch_plan import FetchPlan  # noqa: PLC0415

    def plan(part_bytes: int, max_memory: int = 1000) -> FetchPlan:
        return FetchPlan(NAMES, {**SIZES, "c:0": 300}, set(), max_memory=max_memory, part_bytes=part_bytes)

    assert [plan(b).part_limit() for b in (0, 100, 500, 5000)] == [1000, 300, 500, 1000]
    assert plan(500).cut_words() == "parts of --part-bytes 500 (under --max-memory 1,000)"
    assert plan(0).cut_words() == plan(5000).cut_words() == "--max-memory 1,000"


@pytest.mark.slow
def test_a_capture_cut_by_its_part_size_stores_what_one_fetch_stores(models: dict[str, Path], tmp_path: Path) -> None:
    """The sample detector under its default --max-memory, cut into parts by --part-bytes 60000 (the
    default cuts only fetches above 512 MiB), raised to its largest tensor: every stored tensor is
    bit-identical to one fetch's (--part-bytes 0), and the notes say what cut it."""
    caps = {}
    for name, part_bytes in (("one", "0"), ("parts", "60000")):
        out = tmp_path / name
        proc = run_cli("capture", str(models["detector"]), "--out", str(out), "--onednn", "off",
                       "--part-bytes", part_bytes)
        assert proc.returncode == 0, proc.stderr
        caps[name] = (json.loads((out / "manifest.json").read_text()), Capture.open(out))
    (one, one_cap), (parts, parts_cap) = caps["one"], caps["parts"]
    assert one["fetch_chunks"] == 1 and "fetch_parts" not in one
    # its 16 MiB dense weights are the largest tensor: parts of 16 MiB, each a weight's or the activations'
    assert parts["fetch_chunks"] == 4 and parts["fetch_parts"]["unfed_parts"] == 0
    assert any(n.startswith("fetched in 4 chunks to stay under parts of --part-bytes 16,777,216 (under --max-memory "
                            "2,147,483,648)") for n in parts["notes"]), parts["notes"]
    names = one_cap.tensor_names
    assert names == parts_cap.tensor_names and len(names) > 50
    for name in names:
        np.testing.assert_array_equal(one_cap.tensor(name), parts_cap.tensor(name), err_msg=name)

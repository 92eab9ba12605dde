"""tf-slim models made as tf-slim users make them, traced end to end as a user types the commands.

The artifacts (tests/fixtures/slim_training.py): a small slim net whose ``slim.batch_norm`` is
fused (its default) or not (``fused=False``: ``tf.nn.moments``), and tf-slim's own
``resnet_v1_50``; each trained 3 steps with ``is_training=True`` and saved by
``tf.compat.v1.train.Saver`` (the training graph, no signature), then rebuilt with
``is_training=False``, restored and exported by ``SavedModelBuilder`` with a predict signature.

What is true of them, and what each test holds tftrace to:

- the checkpoint against its export differs first at the first batch norm, where the training
  graph normalises with the batch's statistics and the export with its moving averages (unfused:
  at ``conv1/BatchNorm/batchnorm_1/add``, the first op both graphs hold that reads them; the
  moments themselves the export does not have), the training graph's doing;
- the checkpoint against itself at batch 1 vs 4 differs first at the first batch norm (unfused:
  at ``moments/SquaredDifference``, the first compared op computed from the batch's mean), for
  the same reason, and the kernels before it agree bit for bit;
- the export against itself at batch 1 vs 4 is within tolerance on CPU with oneDNN off: its
  batch norms read the moving averages, so no training graph may be named; the first op to
  differ bitwise is a kernel's choice per shape, whatever plain sessions find here.

The unfused net's batch-1-vs-4 origin (a SquaredDifference) was once said to be "in training
mode (is_training=True)" and, in report.html, "a batch norm in training mode".
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pytest

from conftest import assert_user_error, build_fixture, require_packages, run_cli

pytestmark = pytest.mark.slow

ONEDNN_OFF = {"TF_ENABLE_ONEDNN_OPTS": "0"}  # the numbers below are oneDNN off's; its default depends on the CPU
NAMED = ("--outputs", "predictions/Reshape_1", "--input-names", "images")  # what the error below tells the user to add
BATCH_1_VS_4 = ("--a-batch-size", "1", "--b-batch-size", "4")
FALSE_CAUSES = ("kernel differs", "Shape-dependent kernel choice", "Export-time rewrites", "hold different weights",
                "in training mode (is_training=True) it normalises", "a batch norm in training mode that")
BATCH_WORDS = ("batch statistics — fed identical rows, the op alone still differs: it is computed from statistics "
               "over the batch it runs in (a batch norm in training mode, or a reduction over the batch axis), which "
               "the sides do not share; not its kernel")


@pytest.fixture(scope="module")
def slim_trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_packages("tf_slim", "tf_keras")
    return build_fixture("slim_training.py", tmp_path_factory.mktemp("slim_training"))


def _tftrace(out: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    """``tftrace ARGS --out OUT`` as typed; its exit code, report.json (or diagnosis.json) and stdout."""
    proc = run_cli(*args, "--out", str(out), env=ONEDNN_OFF)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    doc = out / ("diagnosis.json" if args[0] == "diagnose" else "report.json")
    return proc.returncode, json.loads(doc.read_text(encoding="utf-8")), " ".join(proc.stdout.split())


def _page_text(out: Path) -> str:
    """report.html's words, tags stripped."""
    page = re.sub(r"<[^>]+>", " ", (out / "report.html").read_text(encoding="utf-8"))
    return " ".join(html.unescape(page).split())


def _facts(models: Path, net: str) -> dict[str, Any]:
    return json.loads((models / "facts.json").read_text(encoding="utf-8"))[net]


def _assert_training_graph_only(report: dict[str, Any], stdout: str) -> None:
    assert report["verdict"] == "diverged"
    assert report["answers"]["causes"] == ["training_graph"]
    assert "rebuild the model with is_training=False" in report["answers"]["prevent"][0]
    assert not [r for r in report["rewrites"] if r["kind"] == "const_changed"]  # the export restored the very weights
    for false in FALSE_CAUSES:
        assert false not in stdout and false not in " ".join(report["answers"]["why"]), false


# net -> the first op that differs between the checkpoint and its export, and how the why names the training graph
EXPORTED = {
    "fused": ("conv1/BatchNorm/FusedBatchNormV3", "A's graph is a training graph: its batch norms "
              "(`conv1/BatchNorm/FusedBatchNormV3`, `conv2/BatchNorm/FusedBatchNormV3`) run with is_training=True",
              "it differs from B's inference graph (is_training=False there: the moving averages)"),
    "unfused": ("conv1/BatchNorm/batchnorm_1/add", "A's graph takes statistics over the batch, as a batch norm in "
                "training mode does: its `conv1/BatchNorm/moments/mean`, `conv1/BatchNorm/moments/variance` (Mean) "
                "reduce over the batch axis (axis 0)",
                "it differs from B's graph, which takes no statistics over the batch there"),
    "resnet_v1_50": ("resnet_v1_50/conv1/BatchNorm/FusedBatchNormV3", "A's graph is a training graph: its batch norms "
                     "(`resnet_v1_50/conv1/BatchNorm/FusedBatchNormV3`, ",
                     "it differs from B's inference graph (is_training=False there: the moving averages)"),
}


@pytest.mark.parametrize("net", list(EXPORTED))
def test_the_training_checkpoint_against_its_export_is_the_training_graph(slim_trained: Path, tmp_path: Path,
                                                                           net: str) -> None:
    first_op, training, against = EXPORTED[net]
    code, report, stdout = _tftrace(tmp_path / "r", "compare", str(slim_trained / net / "ckpt"),
                                    str(slim_trained / net / "savedmodel"))
    assert code == 1
    first = report["first_divergence"]
    assert first["node"] == report["first_divergence_beyond_tolerance"]["node"] == first_op
    assert first["isolation"]["verdict"] == "batch_statistics"
    conv = first_op.split("/BatchNorm/")[0] + "/Conv2D"  # what the batch norm normalises: the same on both sides
    assert report["nodes"][conv]["status"] == "identical"
    _assert_training_graph_only(report, stdout)
    why = report["answers"]["why"][0]
    assert training in why and against in why
    kinds = {r["kind"] for r in report["rewrites"]}
    facts = _facts(slim_trained, net)
    if net == "unfused":  # the export holds no moments: it reads the moving averages
        assert facts["batch_norms"] == [] and facts["means"][:2] == ["conv1/BatchNorm/moments/mean",
                                                                     "conv1/BatchNorm/moments/variance"]
        assert kinds == {"node_removed", "node_added", "rewired"}
        assert first["isolation"]["detail"].startswith(
            "A's AddV2 is computed from statistics over the batch it runs in (`conv1/BatchNorm/moments/mean`, "
            "`conv1/BatchNorm/moments/variance`: a reduction over the batch axis, which its replay recomputes), B's "
            "takes no batch statistics there: fed the same rows, the replays differ by up to ")
    else:  # is_training: True -> False on every batch norm, nothing else
        assert facts["batch_norms"][0] == first_op and facts["is_training"] == [True]
        assert kinds == {"attr_changed"}
        assert len(report["rewrites"]) == len(facts["inference_batch_norms"])
        assert first["isolation"]["detail"].startswith(
            "A's FusedBatchNormV3 normalises each row with the statistics of the batch it runs in (is_training=True), "
            "B's with its moving averages (is_training=False): fed the same rows, the replays differ by up to ")


def test_a_checkpoint_traced_alone_names_its_prediction_first(slim_trained: Path) -> None:
    """Batch 1 vs 4 of the checkpoint against itself: no side has a signature to borrow."""
    ckpt = str(slim_trained / "fused" / "ckpt")
    proc = run_cli("compare", ckpt, ckpt, *BATCH_1_VS_4, env=ONEDNN_OFF)
    assert_user_error(proc, "has no signature to say what to trace",
                      "candidate inputs: images, labels; candidate outputs, best first: predictions/Reshape_1, "
                      "total_loss", "Name them with --outputs NAME[,NAME...] and --input-names NAME[,NAME...]")


# net -> the first op that differs between batch 1 and 4 of the training checkpoint, and the why's words
BATCHED = {
    "fused": ("conv1/BatchNorm/FusedBatchNormV3", "both sides' graphs are training graphs: their batch norms "
              "(`conv1/BatchNorm/FusedBatchNormV3`, `conv2/BatchNorm/FusedBatchNormV3`) run with is_training=True"),
    "unfused": ("conv1/BatchNorm/moments/SquaredDifference", "both sides' graphs take statistics over the batch, as a "
                "batch norm in training mode does: their `conv1/BatchNorm/moments/mean` (Mean) reduces over the "
                "batch axis (axis 0)"),
}


@pytest.mark.parametrize("net", list(BATCHED))
def test_batch_1_vs_4_of_the_training_checkpoint_is_its_batch_statistics(slim_trained: Path, tmp_path: Path,
                                                                         net: str) -> None:
    first_op, training = BATCHED[net]
    ckpt = str(slim_trained / net / "ckpt")
    code, report, stdout = _tftrace(tmp_path / "r", "compare", ckpt, ckpt, *BATCH_1_VS_4, *NAMED)
    assert code == 1
    first = report["first_divergence"]
    assert first["node"] == report["first_divergence_beyond_tolerance"]["node"] == first_op
    assert first["isolation"]["verdict"] == "batch_statistics"
    assert report["nodes"]["conv1/Conv2D"]["status"] == "identical"
    _assert_training_graph_only(report, stdout)
    why = report["answers"]["why"][0]
    assert training in why and "the sides run different batch sizes, so the outputs differ" in why
    # the same words for a fused batch norm and for an op computed from tf.nn.moments, everywhere they are said
    assert f"{first_op} ({first['op']}), max abs" in stdout and BATCH_WORDS.replace(" — ", ": ") in stdout
    assert (f"The difference starts at {first_op} ({first['op']}), whose value is computed from statistics over the "
            "batch it runs in") in _page_text(tmp_path / "r")
    if net == "unfused":
        assert report["nodes"]["conv1/BatchNorm/moments/mean"]["status"] == "not_compared"  # its value is the batch's
        assert first["isolation"]["detail"].startswith(
            "the sides batch the examples differently, and both sides' SquaredDifference is computed from statistics "
            "over the batch it runs in (`conv1/BatchNorm/moments/mean`: a reduction over the batch axis, which its "
            "replay recomputes)")


@pytest.mark.parametrize("net", ["fused", "unfused"])
def test_batch_1_vs_4_of_the_export_names_no_training_graph(slim_trained: Path, tmp_path: Path, net: str) -> None:
    """The inference export reads the moving averages: batch 1 vs 4 is a kernel's choice per shape at
    most, within tolerance; which op differs first bitwise depends on the CPU, so plain sessions say."""
    from plain_truth import captured_inputs, first_row_divergence  # noqa: PLC0415

    model = slim_trained / net / "savedmodel"
    code, report, stdout = _tftrace(tmp_path / "r", "compare", str(model), str(model), *BATCH_1_VS_4,
                                    "--keep-captures")
    assert code == 0 and report["verdict"] in ("identical", "within_tolerance")
    assert "training_graph" not in report["answers"]["causes"]
    assert "training graph" not in stdout.lower() and "batch statistics" not in stdout
    inputs = captured_inputs(report["sides"]["a"]["capture_dir"])
    rows = list(range(len(next(iter(inputs.values())))))
    truth = first_row_divergence(model, inputs, 1, inputs, 4, rows, onednn="off", atol=report["tolerance"]["atol"],
                                 rtol=report["tolerance"]["rtol"])
    assert truth["beyond_tolerance"] is None
    assert (report["first_divergence"] or {}).get("node") == truth["bitwise"], truth
    if truth["bitwise"] is not None:
        assert report["first_divergence"]["isolation"]["verdict"] == "own_error"
        assert report["answers"]["causes"] == ["batch"]


def test_diagnose_puts_the_unfused_batch_norms_differences_on_the_training_graph(slim_trained: Path,
                                                                                 tmp_path: Path) -> None:
    code, doc, stdout = _tftrace(tmp_path / "d", "diagnose", str(slim_trained / "unfused" / "ckpt"), "--savedmodel",
                                 str(slim_trained / "unfused" / "savedmodel"), "--quick")
    assert code == 1
    runs = {e["name"]: e for e in doc["experiments"] if e.get("verdict")}
    assert {k: e["verdict"] for k, e in runs.items() if k.startswith("repeat")} == {
        "repeat_same_process": "identical", "repeat_fresh_process": "identical"}
    for name, first_op in (("batch_1_vs_8", "conv1/BatchNorm/moments/SquaredDifference"),
                           ("ckpt_vs_savedmodel_batch_1", "conv1/BatchNorm/batchnorm_1/add")):
        assert runs[name]["verdict"] == "diverged" and runs[name]["attribution"] == "training_graph", name
        assert runs[name]["first_divergence"]["node"] == first_op
        assert runs[name]["first_divergence"]["isolation"] == "batch_statistics"
    assert runs["onednn"]["attribution"] is None  # two training graphs over the same batch of 1: kernels only
    answers = doc["answers"]
    assert len(answers["why"]) == 2 and all("Cause: a training graph" in line for line in answers["why"])
    assert all("rebuild the model with is_training=False" in line for line in answers["prevent"])
    assert answers["cost"] == []  # nothing to pay for: the inference graph is what serving runs
    for false in FALSE_CAUSES:
        assert false not in stdout, false

"""How examples are laid out in runs: values that depend on an example's position in its run,
and signatures that take one example without a batch axis (TF Serving's half_plus_two family).

Each model is written by a child process the way its authors wrote theirs; tftrace runs as a
user would (``run_cli``), and every expected number comes from the model's own definition.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli

OFFSET_MODEL = """
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow as tf

class PickPerRow(tf.Module):
    # Per-row argmax indices offset by row*K into the flattened batch, then gathered: the way
    # a detector's batched NMS picks its boxes (idx + row*525).
    @tf.function(input_signature=[tf.TensorSpec([None, 6, 5], tf.float32, name="x")])
    def __call__(self, x):
        batch = tf.shape(x)[0]
        best = tf.argmax(x, axis=2, output_type=tf.int32)
        within = best + tf.range(6)[tf.newaxis, :] * 5
        index = within + (tf.range(batch) * 30)[:, tf.newaxis]
        picked = tf.gather(tf.reshape(x, [-1]), index)
        return {"y": picked * 2.0}

model = PickPerRow()
tf.saved_model.save(model, sys.argv[1], signatures={"serving_default": model.__call__})
"""
OFFSET_ADD = "PartitionedCall/add_1"  # within + row*30
GATHER = "PartitionedCall/GatherV2"


def _write(code: str, *args: str) -> None:
    subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], check=True, capture_output=True, timeout=300,
                   env={**os.environ, "CUDA_VISIBLE_DEVICES": "-1"})


def _compare(out: Path, a: Path | str, b: Path | str, *args: str) -> tuple[int, dict[str, Any], str]:
    proc = run_cli("compare", str(a), str(b), "--out", str(out), "--onednn", "off", "--isolate", "0", *args)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads((out / "report.json").read_text(encoding="utf-8")), proc.stdout


@pytest.fixture(scope="module")
def offset_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("offset") / "pick_per_row"
    _write(OFFSET_MODEL, str(path))
    return path


@pytest.mark.slow
def test_an_index_offset_by_the_row_position_is_not_an_origin(offset_model: Path, tmp_path: Path) -> None:
    """Batch 1 vs 4: the gather index ``argmax + row*30`` is [0..29] in every run of one example and
    [0..119] across a run of four, while what it gathers is the same row for row. Before, the
    AddV2 was the first divergence (max abs 90) of outputs that are identical."""
    code, report, stdout = _compare(tmp_path, offset_model, offset_model, "--examples", "4",
                                    "--a-batch-size", "1", "--b-batch-size", "4")
    assert code == 0 and report["verdict"] == "identical" and stdout.startswith("IDENTICAL")
    assert report["outputs"]["y"]["identical"] is True
    nodes = report["nodes"]
    assert nodes[OFFSET_ADD]["op"] == "AddV2" and nodes[OFFSET_ADD]["status"] == "not_compared"
    assert nodes[OFFSET_ADD]["reason"].startswith("index arithmetic offset by the example's position in its run")
    assert nodes[GATHER]["status"] == "identical" and nodes["PartitionedCall/ArgMax"]["status"] == "identical"
    assert report["origins"] == [] and report["first_divergence"] is None


@pytest.mark.slow
def test_the_same_index_is_compared_when_both_sides_batch_alike(offset_model: Path, tmp_path: Path) -> None:
    code, report, _ = _compare(tmp_path, offset_model, offset_model, "--examples", "4", "--batch-size", "4")
    assert code == 0 and report["nodes"][OFFSET_ADD]["status"] == "identical"

"""A serving signature whose function takes a RaggedTensor (or a SparseTensor): the signature flattens
it into several inputs (``x``: the values, ``x_1``: the row splits), none holding one row per
example. tftrace generated rows for each and the model failed on them, and the fix it gave ("pass
real examples with --inputs FILE.npz") could not be followed: no file's rows can feed them either.
Now it is said before any example is made, with the export that can be traced; the static diff
still works. Built the way its users write it: a ``tf.Module`` saved with a serving signature."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import assert_user_error, build_model, run_cli

pytestmark = pytest.mark.slow

_EXPORT = """
import sys
import tensorflow as tf

class Model(tf.Module):
    def __init__(self):
        self.w = tf.Variable(tf.random.stateless_normal([3, 2], seed=[3, 4]))

    @tf.function(input_signature=[tf.RaggedTensorSpec([None, None, 3], tf.float32, ragged_rank=1)])
    def serve(self, x):
        return {"out": tf.matmul(tf.reduce_sum(x, axis=1), self.w)}

    @tf.function(input_signature=[tf.SparseTensorSpec([None, 3], tf.float32)])
    def sparse(self, x):
        return {"out": tf.sparse.sparse_dense_matmul(x, self.w)}

model = Model()
tf.saved_model.save(model, sys.argv[1], signatures={"serving_default": model.serve, "sparse": model.sparse})
"""


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("composite") / "model"
    build_model(_EXPORT, out)
    return out


def test_a_ragged_argument_is_refused_with_the_export_that_can_be_traced(model: Path, tmp_path: Path) -> None:
    proc = run_cli("compare", str(model), str(model), "--out", str(tmp_path / "r"))
    assert_user_error(proc)
    assert proc.stderr.strip().splitlines()[-1] == (
        f"tftrace: error: signature 'serving_default' of {model} passes a RaggedTensor to `serve`, which the "
        "signature takes as the inputs x, x_1 (its values and row splits, of different lengths): tftrace feeds "
        "examples as rows of dense inputs and cannot cut these into runs. Export a signature that takes padded "
        "values and their lengths, building it inside with tf.RaggedTensor.from_tensor(values, lengths=lengths).")
    assert not (tmp_path / "r").exists()
    assert run_cli("diff-graph", str(model), str(model)).returncode == 0  # nothing is fed: the graphs compare


def test_a_sparse_argument_is_refused_too(model: Path, tmp_path: Path) -> None:
    proc = run_cli("capture", str(model), "--signature", "sparse", "--out", str(tmp_path / "cap"))
    assert_user_error(proc, "passes a SparseTensor to `sparse`", "(its indices, values and dense shape)",
                      "Export a signature that takes the dense tensor, building it inside with tf.sparse.from_dense")
    assert not (tmp_path / "cap").exists()

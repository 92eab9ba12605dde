"""A plain ``.npy`` (one array) given as --inputs to a signature of several inputs is refused with the
fix that works: an ``.npz`` with one array per input, named after the input keys. Where the one
array fits one side and the other side has several inputs, the two models take different inputs:
``--map`` renames keys and cannot split one array, so it is not offered. Every command that reads
--inputs (capture, compare, diagnose) exits 2 with one line and leaves nothing written.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import assert_user_error, build_model, run_cli
from tracer.artifacts.records import TensorSpec
from tracer.captures.inputs import make_examples
from tracer.errors import TftraceError

ENV = {"TF_ENABLE_ONEDNN_OPTS": "0", "CUDA_VISIBLE_DEVICES": "-1"}
MODELS = """
import sys
import tensorflow as tf

class Two(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="a"),
                                  tf.TensorSpec([None, 3], tf.float32, name="b")])
    def serve(self, a, b):
        return {"y": a * 2.0 + b}

class One(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="a")])
    def serve(self, a):
        return {"y": a * 2.0}

for name, module in (("two", Two()), ("one", One())):
    tf.saved_model.save(module, f"{sys.argv[1]}/{name}", signatures={"serving_default": module.serve})
"""


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``two`` (inputs ``a`` and ``b``), ``one`` (input ``a``), and ``one.npy``: 4 examples of ``a``."""
    root = tmp_path_factory.mktemp("one_array")
    build_model(MODELS, root)
    np.save(root / "one.npy", np.ones((4, 3), np.float32))
    return root


def _refused(models: Path, work: Path, *args: str) -> str:
    """Run tftrace in ``work`` (its --out is ``work/out``); exit 2, one line, nothing left in ``work``."""
    work.mkdir()
    proc = run_cli(*args, "--out", str(work / "out"), env=ENV)
    assert_user_error(proc)
    assert sorted(p.name for p in work.iterdir()) == [], list(work.iterdir())  # nothing half-written
    assert "--map A_KEY" not in proc.stderr  # renaming keys is never the fix offered
    [line] = [line for line in proc.stderr.splitlines() if line.startswith("tftrace: error:")]
    return line


def _npz_fix(models: Path) -> str:
    return (f"tftrace: error: {models / 'one.npy'} holds one array but the signature has 2 inputs (a, b). Give "
            "--inputs an .npz that holds one array per input, named after the input keys a, b: "
            "numpy.savez('one.npz', a=..., b=...).")


@pytest.mark.slow
def test_capture_of_two_inputs_from_one_array_asks_for_an_npz_keyed_by_them(models: Path, tmp_path: Path) -> None:
    line = _refused(models, tmp_path / "w", "capture", str(models / "two"), "--inputs", str(models / "one.npy"))
    assert line == _npz_fix(models)


@pytest.mark.slow
def test_compare_whose_side_a_has_two_inputs_asks_for_the_npz(models: Path, tmp_path: Path) -> None:
    line = _refused(models, tmp_path / "w", "compare", str(models / "two"), str(models / "two"),
                    "--inputs", str(models / "one.npy"))
    assert line == _npz_fix(models)


@pytest.mark.slow
def test_compare_of_one_input_with_two_says_the_models_take_different_inputs(models: Path, tmp_path: Path) -> None:
    line = _refused(models, tmp_path / "w", "compare", str(models / "one"), str(models / "two"),
                    "--inputs", str(models / "one.npy"))
    assert line == (
        "tftrace: error: the two signatures cannot be paired: B cannot take A's examples: A's signature has one "
        "input (a), B's has 2 (a, b). Both sides run on the same examples and --map only renames keys, it cannot "
        "split A's one array into B's 2 inputs: compare two models that take the same inputs, or choose B's "
        "signature that takes A's one input with --b-signature.")


@pytest.mark.slow
def test_compare_of_two_inputs_with_one_given_an_npz_of_two_offers_no_map(models: Path, tmp_path: Path) -> None:
    """What follows the .npz fix when B has one input: B refuses A's two arrays. --map cannot drop one."""
    np.savez(tmp_path / "two.npz", a=np.ones((4, 3), np.float32), b=np.ones((4, 3), np.float32))
    line = _refused(models, tmp_path / "w", "compare", str(models / "two"), str(models / "one"),
                    "--inputs", str(tmp_path / "two.npz"))
    assert line == (
        "tftrace: error: the two signatures cannot be paired: B cannot take A's examples: A's signature has 2 "
        "inputs (a, b), B's has one (a). Both sides run on the same examples and --map only renames keys, it cannot "
        "turn A's 2 inputs into B's one: compare two models that take the same inputs, or choose B's signature "
        "that takes A's inputs with --b-signature.")


@pytest.mark.slow
def test_compare_with_a_capture_of_one_input_says_so_naming_no_file_of_tftrace(models: Path, tmp_path: Path) -> None:
    """B is a capture made elsewhere: A runs on its examples, written as ``inputs_from_b.npy`` in --out;
    the refusal once told the user to rewrite that file."""
    capture = tmp_path / "capture_of_one"
    proc = run_cli("capture", str(models / "one"), "--inputs", str(models / "one.npy"), "--out", str(capture), env=ENV)
    assert proc.returncode == 0, proc.stderr
    line = _refused(models, tmp_path / "w", "compare", str(models / "two"), str(capture))
    assert line == (
        "tftrace: error: the two signatures cannot be paired: A cannot take B's examples: B's signature has one "
        "input (a), A's has 2 (a, b). Both sides run on the same examples and --map only renames keys, it cannot "
        "split B's one array into A's 2 inputs: compare two models that take the same inputs, or choose A's "
        "signature that takes B's one input with --a-signature.")


@pytest.mark.slow
def test_diagnose_of_two_inputs_from_one_array_asks_for_the_npz(models: Path, tmp_path: Path) -> None:
    line = _refused(models, tmp_path / "w", "diagnose", str(models / "two"), "--inputs", str(models / "one.npy"),
                    "--quick")
    assert line == _npz_fix(models)


@pytest.mark.slow
def test_diagnose_whose_savedmodel_takes_other_inputs_than_the_model_says_so(models: Path, tmp_path: Path) -> None:
    """The model takes the one array; its --savedmodel, of two inputs, refuses it: no file feeds both."""
    line = _refused(models, tmp_path / "w", "diagnose", str(models / "one"), "--savedmodel", str(models / "two"),
                    "--inputs", str(models / "one.npy"), "--quick", "--batch-sizes", "1,2")
    assert line == (
        f"tftrace: error: the --savedmodel {models / 'two'} has 2 inputs (a, b) and the model one (a), and "
        "diagnose runs both on the same examples. Give --savedmodel the SavedModel exported from MODEL, which "
        "takes the model's inputs; no --inputs file feeds one array to one and several to the other.")


def test_keys_that_are_no_python_names_are_spelled_as_a_dict(tmp_path: Path) -> None:
    specs = {"image tensor": TensorSpec("x:0", "float32", (None,)), "class": TensorSpec("y:0", "float32", (None,))}
    np.save(tmp_path / "x.npy", np.zeros(3, np.float32))
    with pytest.raises(TftraceError) as info:
        make_examples(specs, 8, 0, str(tmp_path / "x.npy"))
    assert info.value.fix == ("give --inputs an .npz that holds one array per input, named after the input keys "
                              "image tensor, class: numpy.savez('x.npz', **{'image tensor': ..., 'class': ...})")

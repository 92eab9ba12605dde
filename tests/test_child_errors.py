"""A failing child is reported as its TensorFlow error, not as a Python stack (issue 25, item 4).

The one line on stderr says what TensorFlow said (its fatal log message, or the exception it
raised with its message); the child's traceback and logs appear only under ``--debug``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import REPO, assert_user_error, run_cli

from tracer.captures.child_errors import cause_in_stderr

BOGUS_XLA = ("--env", "TF_XLA_FLAGS=--bogus_flag")  # a typo in a flag: TensorFlow stops the process at import


def _no_stack(stderr: str) -> None:
    assert "Traceback" not in stderr and 'File "' not in stderr and "worker.py" not in stderr, stderr


@pytest.mark.slow
def test_tensorflow_stopping_the_child_is_its_one_line(real_models: dict[str, Path], tmp_path: Path) -> None:
    """It was "exited with 1; the tail of its stderr: … --tf_xla_clustering_debug=false bool …"."""
    proc = run_cli("capture", str(real_models["half_plus_two"]), "--out", str(tmp_path / "cap"), *BOGUS_XLA)
    assert_user_error(proc, "the child process running capture saved_model_half_plus_two_mkl [cpu, ",
                      ": Unknown flag in TF_XLA_FLAGS: --bogus_flag. Fix what it reports (--debug shows the child's "
                      "stderr); any partial output is left incomplete.")
    _no_stack(proc.stderr)
    assert "parse_flags_from_env" not in proc.stderr and "the tail of its stderr" not in proc.stderr


@pytest.mark.slow
def test_debug_shows_the_childs_stderr_after_the_line(real_models: dict[str, Path], tmp_path: Path) -> None:
    proc = run_cli("capture", str(real_models["half_plus_two"]), "--out", str(tmp_path / "cap"), *BOGUS_XLA,
                   "--debug")
    assert proc.returncode == 2
    child = proc.stderr.split("--- the child process's stderr (last lines) ---\n", 1)[1]
    assert "parse_flags_from_env.cc" in child and "] Unknown flag in TF_XLA_FLAGS: --bogus_flag" in child
    assert proc.stderr.strip().splitlines()[-1].startswith("tftrace: error: the child process running capture ")


@pytest.mark.slow
def test_compare_names_the_failing_side_by_its_error(real_models: dict[str, Path], tmp_path: Path) -> None:
    proc = run_cli("compare", str(real_models["half_plus_two"]), str(real_models["half_plus_two"]), "--out",
                   str(tmp_path / "out"), "--b-env", "TF_XLA_FLAGS=--bogus_flag", "--isolate", "0")
    assert_user_error(proc, "env={'TF_XLA_FLAGS': '--bogus_flag'}] exited with",
                      ": Unknown flag in TF_XLA_FLAGS: --bogus_flag.")
    _no_stack(proc.stderr)


RAISES_IN_TENSORFLOW = """
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import numpy as np
import tensorflow as tf
from tracer.captures.child_errors import describe_exception
tf1 = tf.compat.v1
with tf.Graph().as_default():
    x = tf1.placeholder(tf.float32, [None, 1], name="x")
    y = tf.add(x, 3.0, name="y")
    ids = tf1.placeholder(tf.int32, [None], name="ids")
    row = tf.gather(tf.constant([[1.0], [2.0]]), ids, name="lookup")
    with tf1.Session() as session:
        said = []
        for fetch, feed in ((y, {x: np.float32(1.0)}), (row, {ids: np.array([0, 5], np.int32)})):
            try:
                session.run(fetch, feed_dict=feed)
            except Exception as exc:
                said.append(describe_exception(exc))
        print(json.dumps(said))
        session.run(y, feed_dict={x: np.float32(1.0)})  # uncaught: the traceback a crashed child leaves
"""


@pytest.mark.slow
def test_tensorflows_exceptions_are_said_as_tensorflow_said_them() -> None:
    """A feed of the wrong shape (the issue's "Cannot feed value of shape () for Tensor x:0") and
    an op that raises at run time, raised by a real TensorFlow session."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(RAISES_IN_TENSORFLOW)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    feed, op = json.loads(proc.stdout)
    assert feed == ["ValueError: Cannot feed value of shape () for Tensor x:0, which has shape (None, 1)", True]
    assert op == ["InvalidArgumentError: Node: 'lookup'; indices[1] = 5 is not in [0, 2)", True]
    assert cause_in_stderr(proc.stderr.splitlines()) == (
        "ValueError: Cannot feed value of shape () for Tensor x:0, which has shape (None, 1)")

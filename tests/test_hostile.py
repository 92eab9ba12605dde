"""Hostile models and names, end to end: nothing that should not run runs, nothing leaks out.

Models come from other teams and reports are attached to public trackers (issue 8). The models
here are built by a child process (:data:`BUILD`) into a temporary directory, each with one
side effect aimed at a directory *outside* it: a write, a read, a checkpoint save, a print to a
file, Python callbacks, and the same effects hidden where only loading runs them (a main op,
the ``__saved_model_init_op`` signature, the saver's restore op, a TF2 resource initialiser).
``tftrace capture`` and ``tftrace compare`` must refuse every one before anything runs, list
the op types and node names, and leave the outside directory untouched; ``--allow-unsafe-ops``
runs them; ``diff-graph`` still works. A model reading a vocabulary from its *own* assets is
not hostile and must run.

Names built to break things (``<script>``, quotes, ``../``, 300 characters, non-ASCII, three
names that sanitise alike) go through a real capture and compare. TensorFlow refuses ``<``,
quotes and non-ASCII in node names, so those ride in the signature keys and the model's path,
which reach the same report fields; node names carry ``../../escape``, ``..``, ``a>b`` and the
long name.

The expensive parts are built once per session, also when pytest-xdist spreads this module's
tests over workers (:func:`shared`).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import REPO, assert_user_error, run_cli
from tracer.captures import Capture

PARALLEL = 3
SCRIPT = "<script>alert(1)</script>"
MODEL_DIRS = ("<script>alert(1)<", "script>", "名前 \"q'")  # nested: the path holds SCRIPT verbatim
LONG_NAME = "long_" + "n" * 300
OUTPUT_KEYS = (SCRIPT, "\"'quoted&amp;", "ünïcødé/层")
INPUT_KEY = "ïn\"put'"

BUILD = r'''
import os, shutil, sys
import tensorflow as tf
from tensorflow.core.protobuf import meta_graph_pb2, saved_model_pb2

out, outside, effects = sys.argv[1], sys.argv[2], sys.argv[3]
ESCAPE_KEY = "k\x1b]52;c;cHduZWQ=\x07\x1b[2J\r\x9b31m"
tf1 = tf.compat.v1


def target(name):
    return os.path.join(outside, name)


# ---- TF2 (eager): a resource whose initialiser writes a file when the model is *loaded*
class Leaky(tf.saved_model.experimental.TrackableResource):
    def _create_resource(self):
        return tf.raw_ops.HashTableV2(key_dtype=tf.string, value_dtype=tf.int64)

    def _initialize(self):
        tf.io.write_file(os.path.join(effects, "tf2_initializer.txt"), "pwned")  # for the diff-graph test


class Doubler(tf.Module):
    def __init__(self):
        self.leaky = Leaky()

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
    def f(self, x):
        return {"y": x * 2.0}


module = Doubler()
tf.saved_model.save(module, os.path.join(out, "tf2_initializer"), signatures={"serving_default": module.f})

# ---- TF2: a vocabulary table read from the model's own assets (not hostile)
vocab = target("vocab_tf2.txt")
open(vocab, "w").write("a\nb\nc\n")


class Vocab(tf.Module):
    def __init__(self):
        self.table = tf.lookup.StaticHashTable(tf.lookup.TextFileInitializer(
            vocab, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE, tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER), -1)

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
    def f(self, x):
        return {"y": x * tf.cast(self.table.lookup(tf.constant("c")), tf.float32)}


module = Vocab()
tf.saved_model.save(module, os.path.join(out, "tf2_vocab"), signatures={"serving_default": module.f})
os.remove(vocab)

# ---- TF1 SavedModels
tf1.disable_eager_execution()


def tf1_model(path, build, main_op=None, saver=None, input_key="x", sig_key="serving_default", feed=None):
    with tf1.Graph().as_default():
        x = tf1.placeholder(tf.float32, [None, 4], name="x")
        y = build(x)
        outputs = y if isinstance(y, dict) else {"y": y}
        init = main_op() if main_op else None
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            builder = tf1.saved_model.Builder(path)
            fed = tf1.get_default_graph().get_tensor_by_name(feed) if feed else x
            sig = tf1.saved_model.signature_def_utils.predict_signature_def({input_key: fed}, outputs)
            builder.add_meta_graph_and_variables(
                sess, ["serve"], signature_def_map={sig_key: sig}, main_op=init,
                saver=saver() if saver else None,
                assets_collection=tf1.get_collection(tf1.GraphKeys.ASSET_FILEPATHS))
            builder.save()


def after(effect, x):
    with tf.control_dependencies([effect]):
        return tf.identity(x * 2.0, name="y")


def at(name):
    return os.path.join(out, name)


for name, where in (("write_file", outside), ("write_file_allowed", effects)):
    tf1_model(at(name), lambda x, where=where: after(tf.io.write_file(
        os.path.join(where, "write_file.txt"), tf.strings.as_string(tf.reduce_sum(x), precision=3), name="leak"), x))
tf1_model(at("read_file"), lambda x: x + tf.cast(
    tf.strings.length(tf.io.read_file(target("secret.txt"), name="steal")), tf.float32))
tf1_model(at("save_v2"), lambda x: after(tf.raw_ops.SaveV2(
    prefix=target("dump"), tensor_names=["x"], shape_and_slices=[""], tensors=[x], name="dump"), x))
tf1_model(at("print_v2"), lambda x: after(tf.print(x, output_stream="file://" + target("printed.txt"), name="tee"), x))
tf1_model(at("py_func"), lambda x: x + tf1.py_func(lambda a: a, [x], tf.float32, name="pyfunc")
          + tf.py_function(lambda a: a, [x], tf.float32, name="eager_pyfunc"))
for name, where in (("main_op", outside), ("main_op_replayed", effects)):
    tf1_model(at(name), lambda x: tf.identity(x * 2.0, name="y"), main_op=lambda where=where: tf.group(
        tf.io.write_file(os.path.join(where, "main_op.txt"), "pwned", name="init_write"), name="init_all"))


@tf.function
def hidden(v):
    tf.io.write_file(target("function.txt"), "pwned", name="inner_write")
    return v * 2.0


tf1_model(at("function_write"), lambda x: tf.identity(hidden(x), name="y"))


def leaky_saver():
    saver = tf1.train.Saver(sharded=True)
    leak = tf.io.write_file(target("restore.txt"), "pwned", name="restore_leak")
    restore = tf.group(tf1.get_default_graph().get_operation_by_name(saver.saver_def.restore_op_name), leak,
                       name="restore_and_leak")
    saver.saver_def.restore_op_name = restore.name
    return saver


tf1_model(at("restore_op"), lambda x: tf.identity(x * tf1.get_variable("w", initializer=tf.ones([4])), name="y"),
          saver=leaky_saver)


def unreachable_write(x):
    tf.io.write_file(target("init_signature.txt"), "pwned", name="sig_init_write")
    return tf.identity(x * 2.0, name="y")


tf1_model(at("init_signature"), unreachable_write)  # then named as the init op, as TF >= 2 writes TF1 models
pb = os.path.join(at("init_signature"), "saved_model.pb")
saved = saved_model_pb2.SavedModel()
saved.ParseFromString(open(pb, "rb").read())
saved.meta_graphs[0].signature_def["__saved_model_init_op"].outputs["__saved_model_init_op"].name = "sig_init_write"
open(pb, "wb").write(saved.SerializeToString())

vocab = target("vocab.txt")
open(vocab, "w").write("a\nb\nc\n")


def table_lookup(x):
    table = tf1.lookup.StaticHashTable(tf1.lookup.TextFileInitializer(
        vocab, tf.string, tf1.lookup.TextFileIndex.WHOLE_LINE, tf.int64, tf1.lookup.TextFileIndex.LINE_NUMBER), -1)
    return tf.identity(x * tf.cast(table.lookup(tf.constant("c")), tf.float32), name="y")


tf1_model(at("vocab_table"), table_lookup, main_op=tf1.tables_initializer)
os.remove(vocab)  # from now on only the model's own copy in assets/ exists

# ---- issue 15: ops a deny-list did not know (each refused by the allow-list)
def first(dataset):
    return tf.cast(tf.strings.length(tf.data.experimental.get_single_element(dataset.take(1))), tf.float32)


tf1_model(at("debug_identity"), lambda x: tf.raw_ops.DebugIdentity(
    input=x * 2.0, debug_urls=["file://" + target("debug")], name="debug_tap"))
tf1_model(at("debug_identity_v2"), lambda x: tf.raw_ops.DebugIdentityV2(
    input=x * 2.0, debug_urls=["file://" + target("debug_v2")], name="debug_tap_v2"))
tf1_model(at("fixed_length_record"), lambda x: x + first(tf.data.FixedLengthRecordDataset(target("secret.txt"), 4)))
tf1_model(at("tfrecord_dataset"), lambda x: x + first(tf.data.TFRecordDataset(target("secret.txt"))))
tf1_model(at("dataset_to_tfrecord"), lambda x: after(tf.data.experimental.TFRecordWriter(target("written.tfrecord")).write(
    tf.data.Dataset.from_tensors(tf.strings.as_string(tf.reduce_sum(x)))), x))
tf1_model(at("dataset_cache"), lambda x: x + tf.cast(tf.data.experimental.get_single_element(
    tf.data.Dataset.from_tensors(tf.reduce_sum(x)).cache(target("cache"))), tf.float32))


def whole_file(x):
    queue = tf1.FIFOQueue(4, tf.string, name="files")
    _, value = tf1.WholeFileReader(name="reader").read(queue)
    return x + tf.cast(tf.strings.length(value), tf.float32)


tf1_model(at("whole_file_reader"), whole_file)


def summary_db(x):
    writer = tf.raw_ops.SummaryWriter(shared_name="db", container="")
    create = tf.raw_ops.CreateSummaryDbWriter(writer=writer, db_uri=target("summaries.sqlite"), experiment_name="e",
                                              run_name="r", user_name="u", name="db_writer")
    return after(create, x)


tf1_model(at("summary_db_writer"), summary_db)
tf1_model(at("decode_proto_descriptor"), lambda x: x + tf.cast(tf.raw_ops.DecodeProtoV2(
    bytes=tf.strings.as_string(tf.reduce_sum(x, axis=1)), message_type="tensorflow.Example", field_names=["features"],
    output_types=[tf.string], descriptor_source=target("descriptors.bin"), name="decode").sizes, tf.float32))

# ---- issue 15: structural bypasses
from tensorflow.python.framework import function  # noqa: E402 - TF1's Defun: the op type is the function


def defun_call(x):
    @function.Defun(tf.float32, func_name="leaky_defun")
    def leaky(v):
        with tf.control_dependencies([tf.io.write_file(target("defun.txt"), "pwned", name="defun_write")]):
            return v * 2.0

    return tf.identity(leaky(x), name="y")


tf1_model(at("defun_call"), defun_call)


def fed_multi_output(x):
    secret = tf.cast(tf.strings.length(tf.io.read_file(target("secret.txt"), name="steal_fed")), tf.float32)
    pair = tf.unstack(tf.stack([x, x + secret]), name="pair")  # the signature feeds pair:0; y needs pair:1
    return tf.identity(pair[1] * 2.0, name="y")


tf1_model(at("fed_multi_output"), fed_multi_output, feed="pair:0")

# two meta graphs tagged serve: TF loads the first (here the WriteFile one), a last-wins reader checks the clean one
tf1_model(at("clean"), lambda x: tf.identity(x * 2.0, name="y"))
shutil.copytree(at("write_file"), at("two_serve_meta_graphs"))
pb = os.path.join(at("two_serve_meta_graphs"), "saved_model.pb")
saved, clean = saved_model_pb2.SavedModel(), saved_model_pb2.SavedModel()
saved.ParseFromString(open(pb, "rb").read())
clean.ParseFromString(open(os.path.join(at("clean"), "saved_model.pb"), "rb").read())
saved.meta_graphs.add().CopyFrom(clean.meta_graphs[0])
open(pb, "wb").write(saved.SerializeToString())

# asset paths the loader would join out of assets/
for name, filename in (("asset_absolute", target("secret.txt")), ("asset_dotdot", "../../../outside/secret.txt")):
    shutil.copytree(at("vocab_table"), at(name))
    pb = os.path.join(at(name), "saved_model.pb")
    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString(open(pb, "rb").read())
    meta = saved.meta_graphs[0]
    for asset in meta.asset_file_def:
        asset.filename = filename
    for packed in meta.collection_def["saved_model_assets"].any_list.value:  # where TF1's Builder puts them
        asset = meta_graph_pb2.AssetFileDef()
        packed.Unpack(asset)
        asset.filename = filename
        packed.Pack(asset)
    open(pb, "wb").write(saved.SerializeToString())
shutil.copytree(at("tf2_vocab"), at("tf2_asset_dotdot"))  # the TF2 loader passes asset paths to the initialiser
pb = os.path.join(at("tf2_asset_dotdot"), "saved_model.pb")
saved = saved_model_pb2.SavedModel()
saved.ParseFromString(open(pb, "rb").read())
for asset in saved.meta_graphs[0].asset_file_def:
    asset.filename = "../../../outside/secret.txt"
open(pb, "wb").write(saved.SerializeToString())
shutil.copytree(at("vocab_table"), at("asset_symlink"))
os.remove(os.path.join(at("asset_symlink"), "assets", "vocab.txt"))
os.symlink(target("secret.txt"), os.path.join(at("asset_symlink"), "assets", "vocab.txt"))

# issue 15 item 5: a signature key holding terminal escape sequences
tf1_model(at("escape_key"), lambda x: tf.identity(x * 2.0, name="y"), sig_key=ESCAPE_KEY)

# ---- names built to break things; B differs from A in one constant only
LONG = "long_" + "n" * 300


def names(delta):
    def build(x):
        ab = tf.identity(x * 2.0, name="a/b")
        a_b = tf.identity(x * 3.0, name="a_b")
        escape = tf.add(ab, delta, name="../../escape")
        long = tf.multiply(escape, 0.5, name=LONG)
        gt = tf.add(long, a_b, name="a>b")
        return {"<script>alert(1)</script>": tf.identity(gt, name=".."), "\"'quoted&amp;": ab, "ünïcødé/层": a_b}
    return build


base = os.path.join(out, "<script>alert(1)<", "script>", "名前 \"q'")
tf1_model(os.path.join(base, "names_a"), names(1.0), input_key="ïn\"put'")
tf1_model(os.path.join(base, "names_b"), names(1.001), input_key="ïn\"put'")
'''

# model -> fragments the refusal must name (node and op type); TF2 models are refused at load.
REFUSED: dict[str, tuple[str, ...]] = {
    "write_file": ("'leak' (WriteFile: writes a file)",),
    "read_file": ("'steal' (ReadFile: reads a file)",),
    "save_v2": ("'dump' (SaveV2: writes a checkpoint)",),
    "print_v2": ("'tee' (PrintV2: prints to file://",),
    "py_func": ("'eager_pyfunc' (EagerPyFunc: calls arbitrary Python code)", "'pyfunc' (PyFunc: calls arbitrary Python code)"),
    "main_op": ("'init_write' (WriteFile: writes a file)",),
    "init_signature": ("'sig_init_write' (WriteFile: writes a file)",),
    "restore_op": ("'restore_leak' (WriteFile: writes a file)",),
    "function_write": ("'StatefulPartitionedCall/__inference_hidden_", "/inner_write' (WriteFile: writes a file)"),
    "tf2_initializer": ("'_initialize/__inference__initializer_", "/WriteFile' (WriteFile: writes a file)"),
    # issue 15: ops the deny-list did not know, refused by the allow-list
    "debug_identity": ("'debug_tap' (DebugIdentity: writes debug dumps to its debug_urls)",),
    "debug_identity_v2": ("'debug_tap_v2' (DebugIdentityV2: writes debug dumps)",),
    "fixed_length_record": ("/FixedLengthRecordDatasetV2' (FixedLengthRecordDatasetV2: reads files)",),
    "tfrecord_dataset": ("/TFRecordDataset' (TFRecordDataset: reads files)",),
    "dataset_to_tfrecord": ("(DatasetToTFRecord: writes a file)",),
    "dataset_cache": ("'CacheDataset' (CacheDataset: writes and reads a cache file)",),
    "whole_file_reader": ("'reader' (WholeFileReaderV2: reads files)",),
    "summary_db_writer": ("'db_writer' (CreateSummaryDbWriter: writes a summary database)",),
    "decode_proto_descriptor": ("'decode' (DecodeProtoV2: reads proto descriptors from '", "descriptors.bin')"),
    # issue 15: structural bypasses
    "defun_call": ("/leaky_defun/defun_write' (WriteFile: writes a file)",),
    "fed_multi_output": ("'steal_fed' (ReadFile: reads a file)",),
    "asset_absolute": ("(asset: the loader would feed it '", "/outside/secret.txt', outside the model's assets/)"),
    "asset_dotdot": ("(asset: the loader would feed it '../../../outside/secret.txt', outside the model's assets/)",),
    "asset_symlink": ("(asset: assets/vocab.txt leads to ", "/outside/secret.txt, outside the model's assets/)"),
    "tf2_asset_dotdot": ("(asset: the loader would feed it '../../../outside/secret.txt', outside the model's assets/)",),
}

UNKNOWN_OPS = ("debug_identity", "debug_identity_v2", "fixed_length_record", "tfrecord_dataset", "dataset_to_tfrecord",
               "dataset_cache", "whole_file_reader", "summary_db_writer", "decode_proto_descriptor")
BYPASSES = ("defun_call", "fed_multi_output")
ASSET_ESCAPES = ("asset_absolute", "asset_dotdot", "asset_symlink", "tf2_asset_dotdot")


# --------------------------------------------------------------------------- building once


def shared(factory: pytest.TempPathFactory, name: str, make: Callable[[Path], None]) -> Path:
    """A directory made once per test session, also when pytest-xdist runs this module's tests in
    several workers (each worker would otherwise rebuild module fixtures)."""
    base = factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / f"shared-{name}"
    with open(f"{root}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / ".complete").exists():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir(parents=True)
            make(root)
            (root / ".complete").touch()
    return root


def _run_all(jobs: dict[str, tuple[str, ...]]) -> dict[str, dict[str, Any]]:
    with ThreadPoolExecutor(PARALLEL) as pool:
        futures = {key: pool.submit(run_cli, *args) for key, args in jobs.items()}
        done = {key: future.result() for key, future in futures.items()}
    return {key: {"returncode": p.returncode, "stdout": p.stdout, "stderr": p.stderr} for key, p in done.items()}


def _proc(result: dict[str, Any]) -> subprocess.CompletedProcess:
    return subprocess.CompletedProcess([], result["returncode"], result["stdout"], result["stderr"])


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    def make(root: Path) -> None:
        (root / "outside").mkdir()
        (root / "outside_effects").mkdir()  # where the tests that run effects on purpose let them write
        (root / "outside" / "secret.txt").write_text("not for models")
        subprocess.run([sys.executable, "-c", BUILD, str(root / "models"), str(root / "outside"),
                        str(root / "outside_effects")], cwd=REPO, check=True, capture_output=True)
        (root / "outside_after_build.json").write_text(json.dumps(sorted(os.listdir(root / "outside"))))

    return shared(tmp_path_factory, "hostile-models", make)


# End to end through the CLI: one model per place an effect can hide (signature, restore op, TF2
# load, Python callbacks); every model of REFUSED goes through the same check in process below.
CLI_CAPTURE = ("write_file", "py_func", "restore_op", "tf2_initializer", "dataset_cache", "defun_call", "asset_dotdot")
CLI_COMPARE = ("main_op", "tf2_initializer", "fed_multi_output")
CLI_DIFF = (("write_file", "main_op"), ("restore_op", "init_signature"))


@pytest.fixture(scope="module")
def refusals(built: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The CLI runs above and a capture of the assets model, a few at a time."""
    models = built / "models"

    def make(root: Path) -> None:
        jobs: dict[str, tuple[str, ...]] = {}
        for name in CLI_CAPTURE:
            jobs[f"capture/{name}"] = ("capture", str(models / name), "--out", str(root / "cap" / name), "--examples", "2")
        for name in CLI_COMPARE:
            jobs[f"compare/{name}"] = ("compare", str(models / name), str(models / name), "--out",
                                       str(root / "cmp" / name), "--examples", "2")
        for a, b in CLI_DIFF:
            jobs[f"diff/{a}"] = ("diff-graph", str(models / a), str(models / b), "--json")
        jobs["capture/vocab_table"] = ("capture", str(models / "vocab_table"), "--out", str(root / "cap" / "vocab_table"),
                                       "--examples", "2")
        results = _run_all(jobs)
        results["outside"] = sorted(os.listdir(built / "outside"))
        (root / "results.json").write_text(json.dumps(results))

    root = shared(tmp_path_factory, "hostile-refusals", make)
    return {**json.loads((root / "results.json").read_text()), "root": root}


def _refusal(location: Path, name: str) -> str:
    return f"refusing to {'load' if name.startswith('tf2') else 'run'} {location}: "


# --------------------------------------------------------------------------- hostile models


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_unsafe_model_is_refused_before_it_runs_naming_ops_and_nodes(name: str, built: Path) -> None:
    """What capture, compare and isolation children call before any session exists."""
    from tracer.artifacts.loader import ArtifactRef  # noqa: PLC0415
    from tracer.captures.runtime import load_checked  # noqa: PLC0415 - imports TensorFlow (lazily)
    from tracer.errors import TftraceError  # noqa: PLC0415
    from tracer.runspec import Side  # noqa: PLC0415

    location = built / "models" / name
    with pytest.raises(TftraceError) as refused:
        load_checked(Side(ArtifactRef(str(location))))
    message = str(refused.value)
    assert message.startswith(_refusal(location, name)), message
    # TF1 graphs can still be read statically; a TF2 model cannot even be inlined without loading it
    fix = "every command needs this" if name.startswith("tf2") else "tftrace diff-graph works without running it"
    for fragment in (*REFUSED[name], fix, "pass --allow-unsafe-ops"):
        assert fragment in message, (fragment, message)
    assert sorted(os.listdir(built / "outside")) == ["secret.txt"]


@pytest.mark.slow
@pytest.mark.parametrize("name", CLI_CAPTURE)
def test_capture_refuses_unsafe_model_with_exit_2(name: str, built: Path, refusals: dict[str, Any]) -> None:
    assert_user_error(_proc(refusals[f"capture/{name}"]), _refusal(built / "models" / name, name), *REFUSED[name],
                      "pass --allow-unsafe-ops")
    assert not (refusals["root"] / "cap" / name).exists()


@pytest.mark.slow
@pytest.mark.parametrize("name", CLI_COMPARE)
def test_compare_refuses_unsafe_model_with_exit_2(name: str, built: Path, refusals: dict[str, Any]) -> None:
    assert_user_error(_proc(refusals[f"compare/{name}"]), _refusal(built / "models" / name, name), *REFUSED[name])
    assert not (refusals["root"] / "cmp" / name / "report.json").exists()


@pytest.mark.slow
def test_refused_models_had_no_effect_outside(built: Path, refusals: dict[str, Any]) -> None:
    assert json.loads((built / "outside_after_build.json").read_text()) == ["secret.txt"]
    assert refusals["outside"] == ["secret.txt"]  # none of the effects happened
    assert (built / "outside" / "secret.txt").read_text() == "not for models"


@pytest.mark.slow
def test_diff_graph_still_reads_unsafe_models(refusals: dict[str, Any]) -> None:
    for a, _ in CLI_DIFF:
        proc = _proc(refusals[f"diff/{a}"])
        assert proc.returncode == 0, (a, proc.stderr)
        assert isinstance(json.loads(proc.stdout)["matched"], int)


@pytest.mark.slow
def test_reading_the_models_own_assets_is_allowed(refusals: dict[str, Any]) -> None:
    proc = _proc(refusals["capture/vocab_table"])
    assert proc.returncode == 0, proc.stderr
    cap = Capture.open(refusals["root"] / "cap" / "vocab_table")
    x = cap.tensor("x:0")
    assert np.array_equal(cap.tensor("y:0"), x * np.float32(2))  # "c" is line 2 of the vocabulary in assets/


@pytest.mark.slow
def test_tf2_vocabulary_from_assets_is_not_flagged_at_load(built: Path) -> None:
    from tensorflow.core.protobuf import saved_model_pb2  # noqa: PLC0415 - slow: imports TensorFlow

    from tracer.artifacts.safety import unsafe_at_load_v2  # noqa: PLC0415

    found = {}
    for name in ("tf2_vocab", "tf2_initializer"):
        saved = saved_model_pb2.SavedModel()
        saved.ParseFromString((built / "models" / name / "saved_model.pb").read_bytes())
        found[name] = [op for _, op, _ in unsafe_at_load_v2(saved.meta_graphs[0])]
    assert found == {"tf2_vocab": [], "tf2_initializer": ["WriteFile"]}


@pytest.mark.slow
def test_tf2_vocabulary_model_is_captured_with_its_table(built: Path, tmp_path: Path) -> None:
    """The inliner leaves a TF2 table as a resource placeholder; tftrace refills it from the loaded
    table (``tracer.artifacts.tf2_inline._thaw_tables``), with the vocabulary file outside long deleted."""
    proc = run_cli("capture", str(built / "models" / "tf2_vocab"), "--out", str(tmp_path / "cap"), "--examples", "2")
    assert proc.returncode == 0, proc.stderr
    cap = Capture.open(tmp_path / "cap")
    x = cap.tensor("x:0")
    assert np.array_equal(cap.tensor(cap.manifest["graph"]["outputs"]["y"]), x * np.float32(2))  # "c" is line 2
    lookups = [n for n in cap.tensor_names if n.endswith("LookupTableFindV2:0")]
    assert len(lookups) == 1 and int(cap.tensor(lookups[0])) == 2


@pytest.mark.slow
def test_allow_unsafe_ops_runs_the_write_file_model(built: Path, tmp_path: Path) -> None:
    effect = built / "outside_effects" / "write_file.txt"
    proc = run_cli("capture", str(built / "models" / "write_file_allowed"), "--out", str(tmp_path / "cap"),
                   "--examples", "2", "--allow-unsafe-ops")
    try:
        assert proc.returncode == 0, proc.stderr
        x = Capture.open(tmp_path / "cap").tensor("x:0")
        assert effect.read_text() == f"{float(np.sum(x, dtype=np.float32)):.3f}"
    finally:
        effect.unlink(missing_ok=True)


@pytest.mark.slow
def test_allow_unsafe_ops_reaches_the_side_loaded_ahead(built: Path, tmp_path: Path) -> None:
    """compare loads side B while A is captured (launcher.PreparedChild): the permission must go
    with that early load too, or B's model is refused although the user allowed it."""
    effect = built / "outside_effects" / "write_file.txt"
    model = str(built / "models" / "write_file_allowed")
    try:
        proc = run_cli("compare", model, model, "--out", str(tmp_path / "rep"), "--examples", "2", "--isolate", "0",
                       "--allow-unsafe-ops", "--keep-captures")
        assert proc.returncode == 0, proc.stderr
        report = json.loads((tmp_path / "rep" / "report.json").read_text())
        assert report["verdict"] == "identical"
        assert Capture.open(tmp_path / "rep" / "captures" / "b").manifest["timings"]["loaded_ahead"] is True
        refused = run_cli("compare", model, model, "--out", str(tmp_path / "rep2"), "--examples", "2", "--isolate", "0")
        assert refused.returncode == 2 and "WriteFile" in refused.stderr, refused.stderr
    finally:
        effect.unlink(missing_ok=True)


@pytest.mark.slow
def test_diff_graph_does_not_run_a_tf2_models_initialisers(built: Path) -> None:
    """TensorFlow's load of a TF2 SavedModel runs its resource initialisers: such a model is refused
    for what that load would run, whichever way tftrace then loads it. Given --allow-unsafe-ops, a
    signature that captures only variables is loaded alone (tracer/artifacts/tf2_functions.py), and
    an initialiser of a resource it does not use never runs."""
    effect = built / "outside_effects" / "tf2_initializer.txt"
    model = str(built / "models" / "tf2_initializer")
    try:
        proc = run_cli("diff-graph", model, model)
        assert not effect.exists(), "diff-graph ran the model's resource initialiser"
        assert_user_error(proc, f"refusing to load {model}: loading this TF2 SavedModel runs its resource initialisers",
                          "/WriteFile' (WriteFile: writes a file)", "if you trust the model, pass --allow-unsafe-ops")
        proc = run_cli("diff-graph", model, model, "--json", "--allow-unsafe-ops")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["rewrites"] == []
        assert not effect.exists(), "the signature was loaded alone, the unused resource left uninitialised"
    finally:
        effect.unlink(missing_ok=True)


@pytest.mark.slow
def test_isolation_does_not_take_allow_unsafe_ops_from_a_capture(built: Path, tmp_path: Path) -> None:
    """A capture from elsewhere names a model on this machine and says ``allow_unsafe_ops: true``."""
    from test_fuzz import synthetic  # noqa: PLC0415 - the TF-free capture pair of the reader tests
    from tracer.errors import TftraceError  # noqa: PLC0415
    from tracer.comparison.isolate import isolate_remote  # noqa: PLC0415

    effect = built / "outside_effects" / "main_op.txt"
    a = synthetic(tmp_path / "a", 2.0, str(built / "models" / "main_op_replayed"), allow_unsafe_ops=True)
    b = synthetic(tmp_path / "b", 2.001, "/nonexistent/model_b")
    try:
        proc = run_cli("compare", str(a), str(b), "--out", str(tmp_path / "refused"))
        assert not effect.exists(), "isolation ran the model's main op"
        assert_user_error(proc, "refusing to run", "'init_write' (WriteFile: writes a file)")
        assert not (tmp_path / "refused").exists()  # the failed run took back what it wrote
        # the same capture, its model on another machine: the report keeps the job for `tftrace isolate`
        away = synthetic(tmp_path / "away", 2.0, "/nonexistent/model_a", allow_unsafe_ops=True)
        proc = run_cli("compare", str(away), str(b), "--out", str(tmp_path / "report"))
        assert proc.returncode == 1, proc.stderr
        job_file = tmp_path / "report" / "work" / "isolation_a.job.json"
        job = json.loads(job_file.read_text())
        assert "allow_unsafe_ops" not in job["side"] and "allow_unsafe_ops" not in job, \
            "the job file must not carry the capture's flag: a permission is passed, never recorded"
        # a report from elsewhere whose job file says true (as an older tftrace wrote it, and beside the
        # side, where the launcher passes it to the child), replayed as `tftrace isolate` does
        job["side"]["allow_unsafe_ops"] = True
        job["allow_unsafe_ops"] = True
        job_file.write_text(json.dumps(job))
        with pytest.raises(TftraceError, match=r"refusing to run .*'init_write' \(WriteFile: writes a file\)"):
            isolate_remote(str(built / "models" / "main_op_replayed"), str(tmp_path / "report"), "a")
        assert not effect.exists(), "tftrace isolate ran the model's main op"
    finally:
        effect.unlink(missing_ok=True)


@pytest.mark.slow
def test_two_meta_graphs_for_the_tag_set_are_refused_by_every_reader(built: Path) -> None:
    """TF loads the first meta graph tagged ``serve`` (here the WriteFile one); a reader that kept
    the last checked the clean copy appended after it. Ambiguous: refused, also by diff-graph."""
    from tracer.artifacts.loader import ArtifactRef, load  # noqa: PLC0415
    from tracer.captures.runtime import load_checked  # noqa: PLC0415
    from tracer.errors import TftraceError  # noqa: PLC0415
    from tracer.runspec import Side  # noqa: PLC0415

    location = built / "models" / "two_serve_meta_graphs"
    expected = (f"refusing to load {location}: it holds 2 meta graphs tagged 'serve'; TensorFlow loads the first, "
                "and which one was meant is ambiguous. Re-export the model with one meta graph per tag set.")
    for attempt in (lambda: load_checked(Side(ArtifactRef(str(location)))),
                    lambda: load(str(location), allow_unsafe_ops=True)):
        with pytest.raises(TftraceError) as refused:
            attempt()
        assert str(refused.value) == expected
    assert sorted(os.listdir(built / "outside")) == ["secret.txt"]


ESCAPE_KEY = "k\x1b]52;c;cHduZWQ=\x07\x1b[2J\r\x9b31m"  # OSC 52 (clipboard), clear screen, CR, C1 CSI


@pytest.mark.slow
def test_signature_key_with_escape_sequences_is_shown_escaped(built: Path) -> None:
    proc = run_cli("capture", str(built / "models" / "escape_key"), "--out", str(built / "never"), "--examples", "2")
    assert_user_error(proc, "no signature 'serving_default' (available — tags 'serve': "
                            "k\\x1b]52;c;cHduZWQ=\\x07\\x1b[2J\\r\\x9b31m)")
    for raw in ("\x1b", "\x07", "\r", "\x9b"):
        assert raw not in proc.stderr + proc.stdout, repr(raw)


# --------------------------------------------------------------------------- names built to break things


@pytest.fixture(scope="module")
def names_report(built: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    models = built / "models" / Path(*MODEL_DIRS)

    def make(root: Path) -> None:
        proc = run_cli("compare", str(models / "names_a"), str(models / "names_b"), "--out", str(root / "report"),
                       "--isolate", "0", "--keep-captures")
        (root / "result.json").write_text(json.dumps({"returncode": proc.returncode, "stderr": proc.stderr}))

    root = shared(tmp_path_factory, "hostile-names", make)
    return {**json.loads((root / "result.json").read_text()), "root": root, "report": root / "report"}


@pytest.mark.slow
def test_hostile_names_compare_end_to_end(names_report: dict[str, Any], built: Path) -> None:
    assert names_report["returncode"] == 1, names_report["stderr"]
    report = json.loads((names_report["report"] / "report.json").read_text())
    assert report["first_divergence"]["node"] == "../../escape/y"
    assert {"a/b", "a_b", "a>b", "../../escape", "..", LONG_NAME} <= set(report["nodes"])
    assert sorted(report["outputs"]) == sorted(OUTPUT_KEYS)
    assert str(built / "models" / Path(*MODEL_DIRS) / "names_a") in report["sides"]["a"]["artifact"]["location"]


@pytest.mark.slow
@pytest.mark.parametrize("side", ["a", "b"])
def test_hostile_names_stay_inside_tensors_and_never_collide(names_report: dict[str, Any], side: str) -> None:
    capture_dir = names_report["report"] / "captures" / side
    for path in capture_dir.rglob("*"):
        inside = path.resolve().relative_to(capture_dir.resolve())  # raises if anything resolves outside
        if path.is_dir():
            assert inside == Path("tensors")
        else:
            assert inside == Path("manifest.json") or (inside.parent == Path("tensors") and inside.suffix in (".npy", ".zst"))
            assert len(inside.name) <= 130 and inside.name.isascii()
    stray = [p for p in names_report["root"].rglob("*escape*") if p.parent.name != "tensors"]
    assert stray == []  # "../../escape" became a file name, never a path
    cap = Capture.open(capture_dir)
    files = [cap.record(n)["file"] for n in cap.tensor_names]
    assert len(set(files)) == len(files) == len(cap.manifest["graph"]["nodes"])  # every op has one output
    x = cap.tensor("x:0")
    two, three, half = np.float32(2), np.float32(3), np.float32(0.5)
    delta = np.float32(1.0 if side == "a" else 1.001)
    # a/b, a_b and a>b sanitise alike; each file holds its own tensor, computed in float32 as TF does
    assert np.array_equal(cap.tensor("a/b:0"), x * two)
    assert np.array_equal(cap.tensor("a_b:0"), x * three)
    assert np.array_equal(cap.tensor("../../escape:0"), x * two + delta)
    assert np.array_equal(cap.tensor(f"{LONG_NAME}:0"), (x * two + delta) * half)
    assert np.array_equal(cap.tensor("a>b:0"), (x * two + delta) * half + x * three)
    assert np.array_equal(cap.tensor("..:0"), cap.tensor("a>b:0"))


@pytest.mark.slow
def test_hostile_names_never_reach_html_svg_or_markdown_raw(names_report: dict[str, Any]) -> None:
    out = names_report["report"]
    for name in ("report.html", "report.md", "divergence.svg"):
        text = (out / name).read_text(encoding="utf-8")
        outside_fence = text.split("```sh")[0] if name == "report.md" else text
        assert SCRIPT not in outside_fence, name
    html = (out / "report.html").read_text(encoding="utf-8")
    assert html.count("<script") == 3  # the page's two JSON blocks and its own script, nothing else
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "| &lt;script&gt;alert(1)&lt;/script&gt; | **differs** |" in md
    assert "/&lt;script&gt;alert(1)&lt;/script&gt;/名前 \"q'/names\\_a |" in md  # the model's path, escaped
    fence = md.split("```sh\n", 1)[1].split("\n```", 1)[0]
    assert fence.count("\n") == 0 and fence.startswith("tftrace compare ")  # the command stays inside its fence


@pytest.mark.slow
@pytest.mark.browser
def test_hostile_names_report_in_chromium(names_report: dict[str, Any]) -> None:
    """The real-model report in a browser: no dialog, no error, no request; names shown as text."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")
    from test_report_browser import ARGS, CHROMIUM, open_report  # noqa: PLC0415 - shares the browser setup

    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed at /usr/bin/chromium (apt-get install chromium)")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            opened = open_report(browser, names_report["report"] / "report.html")
            page = opened.page
            page.fill("#search", "escape")
            shown = page.text_content("#search-results")
            assert "../../escape" in shown
            assert SCRIPT in page.text_content("body")  # shown, as text
            assert opened.dialogs == [] and opened.errors == [] and opened.requests == [opened.url]
            assert page.evaluate("document.querySelectorAll('script').length") == 3
        finally:
            browser.close()


# --------------------------------------------------------------------------- the table in RELIABILITY.md


@dataclass(frozen=True)
class Row:
    """One line of RELIABILITY.md: what was tried, how often, what the user saw, what was kept."""

    kind: str
    count: int
    seen: str
    kept: str
    tests: tuple[str, ...]  # "file.py::test_function"


def reliability_rows() -> tuple[list[Row], list[Row]]:
    """The rows, with counts taken from the tests' own case lists (so they cannot drift)."""
    from test_faults import SIGNALS  # noqa: PLC0415
    from test_hostile_library import ATTACKS as LIBRARY_ATTACKS, LATENT  # noqa: PLC0415
    from test_out_dir import PLANTED  # noqa: PLC0415
    from test_fuzz import (  # noqa: PLC0415
        EXAMPLES, MANIFEST_ATTACKS, REFUSED_REPORT_TEXTS, REFUSED_REPORTS, SAFE_REPORTS, TEXT_ATTACKS,
    )
    from test_report_render import HOSTILE as RENDER_HOSTILE  # noqa: PLC0415
    from test_store import HOSTILE as STORE_HOSTILE  # noqa: PLC0415

    h, f, fz = "test_hostile.py::", "test_faults.py::", "test_fuzz.py::"
    inputs = [
        Row("models with ops that reach outside the computation (WriteFile, ReadFile of a path outside, SaveV2, "
            "PrintV2 to file://, PyFunc+EagerPyFunc, WriteFile inside a function; and only at load: main op, "
            "`__saved_model_init_op`, the saver's restore op, a TF2 resource initialiser)",
            len(REFUSED) - len(UNKNOWN_OPS + BYPASSES + ASSET_ESCAPES),
            "`tftrace: error: refusing to run MODEL: running it would execute ops with effects outside the "
            "computation: 'leak' (WriteFile: writes a file). Inspect the model (tftrace diff-graph works without "
            "running it); if you trust it, pass --allow-unsafe-ops.` (exit 2; TF2: `refusing to load`)",
            "nothing ran: no file appeared outside, no capture directory, no report",
            (f"{h}test_unsafe_model_is_refused_before_it_runs_naming_ops_and_nodes",
             f"{h}test_capture_refuses_unsafe_model_with_exit_2", f"{h}test_compare_refuses_unsafe_model_with_exit_2",
             f"{h}test_refused_models_had_no_effect_outside")),
        Row("ops a deny-list did not know (issue 15): DebugIdentity and DebugIdentityV2 with a file:// URL, "
            "FixedLengthRecordDatasetV2, TFRecordDataset, DatasetToTFRecord, `.cache(path)` (CacheDataset), "
            "WholeFileReader, CreateSummaryDbWriter, DecodeProtoV2 with a `descriptor_source` file", len(UNKNOWN_OPS),
            "`tftrace: error: refusing to run MODEL: … 'CacheDataset' (CacheDataset: writes and reads a cache file); "
            "'DatasetToSingleElement' (DatasetToSingleElement: not known to compute from its inputs alone) …` (exit 2): "
            "an op runs only when TensorFlow's registry calls it stateless and it names no file or URL "
            "(`tracer/artifacts/safe_ops.py`, generated and checked against TF 2.21), or it is a stateful op allowed with its reason",
            "nothing ran: no file appeared outside, none was read; every sample model and both real models (all 9 "
            "signatures) still pass the check",
            (f"{h}test_unsafe_model_is_refused_before_it_runs_naming_ops_and_nodes",
             f"{h}test_refused_models_had_no_effect_outside",
             "test_safe_ops.py::test_committed_allow_list_is_what_the_registry_derives",
             "test_safe_ops.py::test_ops_that_reach_outside_are_not_allowed",
             "test_safe_ops.py::test_unknown_op_is_refused_by_name_and_descriptor_source_decides_decode_proto",
             "test_safe_ops.py::test_sample_and_real_models_pass_the_check_on_every_signature")),
        Row("structural bypasses of the scan: a WriteFile in a Defun called as a node's op type; a fed `pair:0` while "
            "`pair:1` (and so op `pair`, fed by a ReadFile) still runs", len(BYPASSES),
            "`… 'leaky_defun/leaky_defun/defun_write' (WriteFile: writes a file) …`; `… 'steal_fed' (ReadFile: reads a "
            "file) …` (exit 2)", "nothing ran; the scan follows tensors (stops only at fed tensors), control edges and "
            "Defun calls", (f"{h}test_unsafe_model_is_refused_before_it_runs_naming_ops_and_nodes",
                            "test_safe_ops.py::test_scan_follows_tensors_defun_calls_and_control_edges")),
        Row("asset paths out of the model's `assets/`: absolute, `../../../outside/secret.txt`, a symlinked asset file "
            "(TF1), and `../` in a TF2 SavedModel (refused before `tf.saved_model.load`)",
            len(ASSET_ESCAPES), "`… 'asset_path:0' (asset: the loader would feed it '../../../outside/secret.txt', "
            "outside the model's assets/); 'text_file_init/InitializeTableFromTextFileV2' (InitializeTableFromTextFileV2: "
            "reads a file) …` (exit 2)", "the table was not filled from the outside file",
            (f"{h}test_unsafe_model_is_refused_before_it_runs_naming_ops_and_nodes",
             f"{h}test_capture_refuses_unsafe_model_with_exit_2")),
        Row("a SavedModel with two meta graphs tagged `serve` (TF loads the first, a WriteFile model; a clean one "
            "appended last)", 1, "`tftrace: error: refusing to load MODEL: it holds 2 meta graphs tagged 'serve'; "
            "TensorFlow loads the first, and which one was meant is ambiguous. Re-export the model with one meta graph per "
            "tag set.` (exit 2, also with `--allow-unsafe-ops` and from `diff-graph`)", "nothing loaded",
            (f"{h}test_two_meta_graphs_for_the_tag_set_are_refused_by_every_reader",)),
        Row("a signature key and a node name holding terminal escapes (OSC 52 clipboard write, `ESC[2J`, `\\r`, C1 "
            "CSI `\\x9b`): in an error line, the terminal tables, report.md and report.html", 4,
            "`tftrace: error: no signature 'serving_default' (available — tags 'serve': "
            "k\\x1b]52;c;cHduZWQ=\\x07\\x1b[2J\\r\\x9b31m). …` (exit 2): the characters shown as escapes",
            "no control character reached stderr, the terminal, report.md or report.html; report.json keeps the exact key",
            (f"{h}test_signature_key_with_escape_sequences_is_shown_escaped",
             "test_text.py::test_error_messages_escape_model_text",
             "test_text.py::test_terminal_tables_show_escapes_not_control_characters",
             "test_text.py::test_report_md_and_html_carry_no_control_characters")),
        Row("the same models through the CLI (capture runs, compare runs)", len(CLI_CAPTURE) + len(CLI_COMPARE),
            "the line above, exit 2", "no `--out` directory created", (f"{h}test_capture_refuses_unsafe_model_with_exit_2",
                                                                       f"{h}test_compare_refuses_unsafe_model_with_exit_2")),
        Row("models reading their *own* assets (TF1 vocabulary table in the main op; TF2 table initialiser)", 2,
            "nothing: they run (`y = 2x` from line 2 of the vocabulary, the original deleted; TF1 reads assets/vocab.txt, "
            "TF2's table is refilled from the loaded model)",
            "the original vocabulary outside was deleted before the run, so only the asset could be read",
            (f"{h}test_reading_the_models_own_assets_is_allowed", f"{h}test_tf2_vocabulary_from_assets_is_not_flagged_at_load",
             f"{h}test_tf2_vocabulary_model_is_captured_with_its_table")),
        Row("`--allow-unsafe-ops` on the WriteFile model", 1, "exit 0; the file holds the sum of the inputs",
            "the user asked for it", (f"{h}test_allow_unsafe_ops_runs_the_write_file_model",)),
        Row("`diff-graph` on unsafe TF1 models", 2 * len(CLI_DIFF), "the diff (exit 0)", "static: nothing runs",
            (f"{h}test_diff_graph_still_reads_unsafe_models",)),
        Row("`diff-graph` on a TF2 model whose resource initialiser writes a file (inlining it means loading it)", 1,
            "`tftrace: error: refusing to load MODEL: loading this TF2 SavedModel runs its resource initialisers and "
            "restore functions, which would execute ops with effects outside the computation: … (WriteFile: writes a "
            "file). tftrace reads a TF2 SavedModel by loading it, so every command needs this: if you trust the model, "
            "pass --allow-unsafe-ops.` (exit 2)", "the initialiser did not run: no file appeared",
            (f"{h}test_diff_graph_does_not_run_a_tf2_models_initialisers",)),
        Row("names built to break things in a real model, captured and compared: node names `a/b` `a_b` `a>b` "
            "(sanitise alike), `../../escape`, `..`, a 305-character name; signature keys `<script>alert(1)</script>`, "
            "quotes and `&amp;`, non-ASCII; the model's path holding `<script>alert(1)</script>` and quotes", 11,
            "the report, names shown as text (escaped in HTML, SVG and Markdown; the Markdown command stays in its fence)",
            "every file stays in `tensors/` under a hashed name; the three look-alikes hold their own values",
            (f"{h}test_hostile_names_compare_end_to_end", f"{h}test_hostile_names_stay_inside_tensors_and_never_collide",
             f"{h}test_hostile_names_never_reach_html_svg_or_markdown_raw", f"{h}test_hostile_names_report_in_chromium")),
        Row("hostile tensor names written and read back directly (store), and in a rendered report", len(STORE_HOSTILE)
            + len(RENDER_HOSTILE), "nothing: names stay names", "no path leaves the capture; no script runs in Chromium",
            ("test_store.py::test_hostile_names_stay_inside_tensors_and_never_collide",
             "test_store.py::test_safe_filename_is_safe_and_injective",
             "test_report_render.py::test_hostile_strings_never_reach_html_svg_or_markdown_raw",
             "test_report_browser.py::test_hostile_names_stay_text_in_chromium")),
        Row("hand-made manifests: paths out of the capture (`..`, absolute, symlink), 2**50 elements, wrong types, "
            "a cycle in the op graph, missing parts, false `alias_of` claims (missing, other shape, a chain, through a "
            "symlink), NaN, 100,000-deep nesting, 1 GiB, not UTF-8; an .npy header claiming 2**40 elements", len(MANIFEST_ATTACKS) + len(TEXT_ATTACKS) + 1,
            "`tftrace: error: damaged capture at CAP: tensor 'x:0': file path '../../../../etc/passwd' contains '..' or "
            "a backslash. Re-run the capture with --force; capture directories are not meant to be edited.` (exit 2)",
            "nothing allocated or mapped beyond the declared size; no report written",
            (f"{fz}test_hand_made_manifest_is_refused_by_compare", f"{fz}test_malformed_manifest_text_is_refused_by_compare",
             f"{fz}test_npy_header_claiming_2_40_elements_is_refused_before_mapping",
             "test_store.py::test_tampered_manifest_is_refused")),
        Row("a real tensor larger than `--max-memory`", 1, "`tftrace: error: tensor dense/weights:0 alone needs about "
            "16,777,216 bytes per run, more than --max-memory 1,000,000. Raise --max-memory, or lower --batch-size.`",
            "refused before the capture directory exists", ("test_capture.py::test_a_tensor_larger_than_max_memory_is_refused",)),
        Row("shapes known only at run time: a `tf.fill` sized by an input value (in the first batch; in a later one) "
            "with `--max-memory 20000000`", 2,
            "`tftrace: error: tensor on_path:0 is 40,000,000 bytes per run on these inputs (its shape is set at run "
            "time), more than --max-memory 20,000,000. Raise --max-memory, or lower --batch-size or the input values "
            "that size it.` (exit 2): the traced plain runs measure every executed tensor; a fetched tensor over the "
            "limit stops the capture before it is written", "refused before the capture directory exists",
            ("test_runtime_limits.py::test_fill_sized_by_an_input_value_is_refused_before_the_capture_exists",
             "test_runtime_limits.py::test_fill_sized_by_a_later_batch_is_refused_before_the_capture_exists",
             "test_runtime_limits.py::test_refit_sizes_chunks_by_measured_sizes_and_refuses_what_alone_exceeds",
             "test_runtime_limits.py::test_check_fetched_refuses_over_the_limit_and_learns_sizes_under_it")),
        Row("weights larger than `--max-memory` (a TF1 checkpoint; a SavedModel's variables/)", 2,
            "`tftrace: error: the weights in PREFIX take 18,222,528 bytes (26 variables in its index; the largest, "
            "'dense/weights', 16,777,216 bytes), more than --max-memory 10,000,000; restoring them would load them all "
            "into memory.` (exit 2)", "measured from the index and the .data shards before anything is restored; no "
            "capture directory", ("test_runtime_limits.py::test_checkpoint_larger_than_max_memory_is_refused_before_restoring",)),
        Row("links planted in a received report directory for `tftrace report` (report.html, report.md, report.json, "
            "divergence.svg, the ownership record → `evil.pth` outside); links at the old predictable temp names "
            "(`.report.json.tmp`…); a capture's manifest.json and a tensor file; a directory that is a link; a hard link "
            "and a symlink planted at `.tftrace.lock`; `isolate --from` a report whose `work/isolation_a` (or its "
            "`0.npy`) is a link", len(PLANTED) + 8,
            "`tftrace: error: DIR/report.html is a symbolic link; tftrace never writes through a link (one planted in a "
            "directory received from someone else would make it overwrite a file elsewhere). Delete the link "
            "DIR/report.html (or use another directory) and re-run.` (exit 2); links at temp names are ignored: temp "
            "names are random, created O_EXCL|O_NOFOLLOW", "nothing created or changed outside; no temp file left",
            ("test_out_dir.py::test_planted_link_in_a_received_report_is_refused",
             "test_out_dir.py::test_planted_link_at_the_old_predictable_temp_name_is_never_used",
             "test_out_dir.py::test_manifest_and_tensor_file_are_never_written_through_a_link",
             "test_out_dir.py::test_write_file_refuses_a_directory_that_is_a_link",
             "test_out_dir.py::test_a_planted_lock_file_is_never_written_into",
             "test_report_dir.py::test_isolate_from_a_received_report_never_writes_through_a_planted_link")),
        Row("`--force` into an `--out` holding a user's files (beside a tftrace report; a directory without tftrace's "
            "record; a record listing `../` paths)", 3,
            "`tftrace: error: --force would replace OUT, but it holds files tftrace did not write there (.notes, "
            "thesis.tex); --force deletes only what tftrace recorded writing in a report directory. Move those files "
            "away, or choose an empty or new --out directory.` (exit 2)",
            "nothing deleted; `.tftrace-owned.json` lists what tftrace created (claimed before writing), and only "
            "plain names in it count", ("test_out_dir.py::test_force_refuses_when_a_user_file_is_in_out_and_deletes_nothing",
                                        "test_out_dir.py::test_force_on_a_directory_without_a_record_refuses",
                                        "test_out_dir.py::test_a_record_from_elsewhere_cannot_reach_outside",
                                        "test_out_dir.py::test_force_deletes_exactly_what_tftrace_recorded")),
        Row("`--out` that is a symbolic link (compare and capture, with and without `--force`; a capture writer)", 5,
            "`tftrace: error: --out OUT is a symbolic link; tftrace writes only into a real directory, so that what it "
            "writes and what --force deletes stay where you asked. Pass the directory it points to (TARGET) or a new "
            "directory as --out.` (exit 2)", "the link's target untouched (a file of the user's in it kept)",
            ("test_out_dir.py::test_out_that_is_a_link_is_refused_clearly",)),
        Row("a capture whose recorded side asks for `PYTHONPATH` (a `sitecustomize.py`) in the replay child", 1,
            "`tftrace: error: the side to replay asks for PYTHONPATH in the child's environment, as recorded in a "
            "capture or report file; … If you trust the file, set them in your own shell first …`",
            "no child started; the planted code did not run", (f"{fz}test_isolation_does_not_take_code_loading_environment_from_a_capture",)),
        Row("a capture whose recorded side says `allow_unsafe_ops: true`, naming a local model with an unsafe main op", 1,
            "`tftrace: error: refusing to run MODEL: … 'init_write' (WriteFile: writes a file) …` (exit 2), from "
            "`compare` and from `tftrace isolate` on the job file", "the main op did not run; the flag comes only "
            "from the command line (`--allow-unsafe-ops`)", (f"{h}test_isolation_does_not_take_allow_unsafe_ops_from_a_capture",)),
        Row("hostile report.json that still renders: 5 MB name, 10 MB command, wrong-typed nodes/metrics/rewrites/edges",
            len(SAFE_REPORTS), "the report (exit 0/1)", "no raw markup reaches report.html",
            (f"{fz}test_hostile_report_json_renders_safely",)),
        Row("hostile report.json with wrong top-level types, missing keys, NaN, 100,000-deep nesting",
            len(REFUSED_REPORTS) + len(REFUSED_REPORT_TEXTS),
            "`tftrace: error: REPORT/report.json is not a valid tftrace report: \"nodes\" must be an object. Re-run tftrace "
            "compare to rewrite it.` (exit 2)", "report.json is left as it was, no report.html written",
            (f"{fz}test_hostile_report_json_is_refused_with_a_clear_message", f"{fz}test_malformed_report_json_text_is_refused")),
        Row("report strings that are console markup (`[/oops]`, `[link=…]`)", 1,
            "the strings, printed as text", "report files written; nothing interpreted as markup",
            (f"{fz}test_terminal_summary_prints_names_as_text",)),
        Row("fuzzed capture directories (mutated manifest JSON, flipped/cut/inserted bytes in manifest and .npy files)",
            EXAMPLES["capture"], "a `damaged capture` error or the tensors", "no other exception",
            (f"{fz}test_fuzz_capture_open_and_read",)),
        Row("fuzzed manifests through a whole `compare` (TF-free)", EXAMPLES["compare"], "an error line or a report", "no other exception",
            (f"{fz}test_fuzz_compare_on_mutated_captures",)),
        Row("fuzzed report.json through `load_report`", EXAMPLES["report"], "an error line or the report", "no other exception",
            (f"{fz}test_fuzz_load_report",)),
        Row("fuzzed artifact directories (random saved_model.pb bytes, checkpoint text, .meta, layouts) through "
            "detection and loading", EXAMPLES["artifacts"], "`tftrace: error: … is not a valid SavedModel …` or an artifact",
            "no other exception", (f"{fz}test_fuzz_artifact_detection_and_loading",)),
        Row("what a Keras user has instead of a graph: a `.keras`/`.h5` model file, a `.weights.h5` weights file, a "
            "directory holding a `.keras` file", 3,
            "`tftrace: error: PATH is a Keras model file; tftrace reads TensorFlow graphs, and a Keras file holds a "
            "Python model. Export it as a SavedModel and give that directory: in Python, "
            "keras.models.load_model('PATH').export('exported') …` (exit 2; the weights file: rebuild, load_weights, "
            "export)", "nothing ran; no --out directory left behind",
            ("test_artifacts.py::test_keras_file_is_refused_with_the_export_that_makes_it_readable",
             "test_artifacts.py::test_keras_weights_and_a_directory_holding_a_keras_file_say_how_to_export",
             "test_keras_export.py::test_a_keras_file_is_refused_with_the_export_that_makes_it_readable")),
        Row("a GraphDef calling functions it does not define (optimize_for_inference drops a TF2 loop's body and "
            "cond)", 1, "`tftrace: error: the graph of PATH calls functions it does not define: map_while_body_243 "
            "(called by 'loop'). Export it again with its function library …` (exit 2)", "refused at load, before any run",
            ("test_diff_graph_cli.py::test_graph_def_calling_a_function_it_does_not_define",)),
        Row("inputs files holding Python objects, unicode strings; generated inputs a model refuses (integer ids "
            "beyond a 4-row embedding)", 3, "`tftrace: error: FILE holds an array of Python objects (…). Save plain "
            "arrays; strings as bytes …`; unicode fed as UTF-8 bytes; `… These inputs were generated by tftrace "
            "(seed 0, integers 0-9), which may be outside what the model accepts …: pass real examples with --inputs "
            "FILE.npz.` (exit 2)", "no pickle loaded; no capture directory",
            ("test_capture_inputs.py::test_unicode_strings_are_fed_as_utf8_bytes_and_object_arrays_refused",
             "test_capture.py::test_generated_ids_outside_an_embedding_are_said_to_be_tftraces_own")),
        Row("a compare that fails after its first capture (B cannot take A's examples), run twice", 2,
            "the same error both times (exit 2): the retry is not refused as \"not empty\"",
            "the failed run takes back what it wrote in --out (and the directory it made); a user's file written "
            "there meanwhile stays",
            ("test_out_dir.py::test_a_failed_run_takes_back_what_it_wrote_and_keeps_the_users_files",
             "test_out_dir.py::test_a_compare_that_fails_after_its_first_capture_can_be_run_again")),
        Row("a typo in a side's path (compare's B, diff-graph's A, capture --dir)", 3,
            "`tftrace: error: side B's path …_mlk does not exist (did you mean …_mkl?). Check the path …` (exit 2) "
            "in under a second: before TensorFlow is imported or a child started", "nothing written; no --out made",
            ("test_cli_help.py::test_a_typo_in_bs_path_is_said_at_once_with_its_side",
             "test_cli_help.py::test_capture_takes_one_model_by_position_or_by_dir")),
        Row("a signature whose declared shapes contradict its graph (TF 1.0's TensorInfos without a shape: TF "
            "Serving's half_plus_three declares x and y scalars, x:0 is [?, 1]); one that leaves sizes unknown", 2,
            "compare runs (DIVERGED by 1.0 on y against half_plus_two); B's side notes: \"signature 'serving_default' "
            "declares input 'x' (x:0) as a scalar … fed and read with the graph's shapes, as a session does\"",
            "the graph's shapes feed the side; the report",
            ("test_signature_shapes.py::test_half_plus_two_against_half_plus_three_feeds_the_graphs_shape",
             "test_signature_shapes.py::test_a_signature_that_knows_less_than_its_graph_takes_the_graphs_sizes")),
        # issue 24: round three, one row per class
        *library_rows(LIBRARY_ATTACKS, LATENT),
        Row("environment from a received capture or report job (issue 24): `TF_DUMP_GRAPH_PREFIX`, `ONEDNN_JIT_DUMP`, "
            "`TF_XLA_FLAGS=--tf_xla_clustering_debug`, `XLA_FLAGS=--xla_dump_to`, `CUDA_INJECTION64_PATH`; a knob "
            "tftrace sets with a value it does not take", 3,
            "`tftrace: error: the side to replay asks for CUDA_INJECTION64_PATH, ONEDNN_JIT_DUMP, TF_DUMP_GRAPH_PREFIX, "
            "TF_XLA_FLAGS, XLA_FLAGS in the child's environment, as recorded in a capture or report file; tftrace "
            "replays from files only its own knobs (…) with the values they take …` (exit 2; also `tftrace isolate`)",
            "no child started, no dump written; tftrace's own knobs still replay",
            ("test_hostile_library.py::test_isolation_takes_no_dump_or_injection_environment_from_a_capture",
             "test_hostile_library.py::test_isolation_still_replays_tftraces_own_knobs_from_a_capture")),
        Row("a received capture whose tensor has another tensor's chunk file but keeps its own `values_digest` "
            "(issue 24: equal digests were IDENTICAL, exit 0, for tensors 2x apart)", 1,
            "`tftrace: error: damaged capture at CAP: tensor 'mul:0': its values_digest xxh3-128:… is not the digest "
            "of its stored values (…)` (exit 2)", "no report; an untouched received capture is still identical "
            "(verified by reading); captures this run wrote are compared without a read as before",
            ("test_received.py::test_a_values_digest_is_checked_against_the_stored_bytes",
             "test_received.py::test_an_untouched_received_capture_is_still_identical",
             "test_compare_digests.py::test_packed_tensors_with_equal_values_digests_are_compared_without_a_read")),
        Row("the model writes on tftrace's event channel (issue 24): PrintV2 to stdout of an `error` event and a bare "
            "`progress` line (capture); of `ready`, a `time` of 0.125 ms and an `error` (diagnose's timing children); "
            "events with missing or wrong-typed fields", 3,
            "nothing: the capture succeeds (exit 0) and the timings are the model's own; events travel on a pipe of "
            "their own, the model's stdout goes with the child's stderr, and malformed events are dropped (it was exit "
            "2 with the model's words, or a KeyError; the timer raised the model's error as its own)",
            "the capture is complete; every timing is a real run's",
            ("test_hostile_library.py::test_a_model_printing_tftraces_events_to_stdout_is_not_heard",
             "test_hostile_library.py::test_a_model_printing_timing_events_to_stdout_is_not_heard_by_diagnoses_timer",
             "test_capture_launcher.py::test_events_with_missing_or_wrong_fields_are_dropped_not_a_crash")),
        Row("decompression bombs in capture format 2 (issue 24): a few KB of zstd declaring 1 GiB in one chunk; "
            "256 MiB rows one chunk each, under `--max-memory 50000000`", 2,
            "`tftrace: error: damaged capture at CAP: tensor 'mul:0': chunk of rows 0:4 holds 1,073,741,824 bytes of "
            "rows; tftrace writes at most 1 row of this tensor per chunk …`; `… decoding one chunk of it takes "
            "268,435,456 bytes, more than --max-memory 50,000,000 …` (exit 2)",
            "refused before anything is inflated; no report",
            ("test_received.py::test_a_decompression_bomb_chunk_is_refused_before_it_is_inflated",
             "test_received.py::test_chunks_laid_out_as_the_writer_does_are_bounded_by_max_memory")),
        Row("huge or wide strings (issue 24): 16 scalar strings of 40 MB each built from a 1 KB constant (step "
            "statistics count only the header); a `[2048]` string tensor with one 917 KB element (1.8 GB stored "
            "fixed-width), both under `--max-memory 50000000`; a string of 1,200,000 bytes", 3,
            "`tftrace: error: the string tensors that do not depend on the inputs take 1,280,016,000 bytes in all (48 "
            "of them; …), more than --max-memory 50,000,000: TensorFlow folds each into a constant that the session "
            "keeps …`; `tftrace: error: tensor wide:0 is 1,878,016,000 bytes per run by its strings' lengths (sized "
            "before it was fetched), more than --max-memory 50,000,000 …` (exit 2): strings are sized by their "
            "contents before they are fetched (it was exit 0 at 2.5 GB peak, and 1.8 GB on disk); the megabyte "
            "string is captured and read back (it was refused as `stored dtype '|S…' does not hold string`)",
            "nothing of them fetched or written; the capture is left incomplete; the sixteen strings are refused "
            "within the memory the model's own plain run takes (0.73 GB against 0.69 GB)",
            ("test_hostile_library.py::test_sixteen_strings_of_40_mb_are_refused_within_the_memory_the_model_itself_takes",
             "test_hostile_library.py::test_a_wide_string_tensor_is_sized_by_its_contents_before_it_is_stored",
             "test_hostile_library.py::test_a_string_of_a_megabyte_is_captured_and_read_back")),
        Row("`isolate --from` a received report whose `work/` itself is a symbolic link (issue 24)", 1,
            "`tftrace: error: DIR/work is a symbolic link; tftrace never writes through a link …` (exit 2): work/ "
            "is walked without following links", "nothing read or written through the link",
            ("test_report_dir.py::test_isolate_from_a_received_report_never_writes_through_a_planted_link",)),
    ]
    faults = [
        Row("SIGINT or SIGTERM to `tftrace capture` while its worker writes tensors", len(SIGNALS),
            "`tftrace: interrupted; nothing incomplete was left looking complete` (exit 2)",
            "no manifest.json (refused as incomplete), worker gone, `--force` re-run succeeds",
            (f"{f}test_signal_to_capture_leaves_it_incomplete_and_force_rerun_works",)),
        Row("SIGINT or SIGTERM to `tftrace compare` while capturing A", len(SIGNALS), "the same line (exit 2)",
            "no report.json, no manifest in captures/a, worker gone, `--force` re-run succeeds",
            (f"{f}test_signal_to_compare_leaves_no_report_and_force_rerun_works",)),
        Row("SIGKILL to `tftrace capture` itself (no chance to clean up)", 1, "nothing (tftrace is gone)",
            "the orphaned worker stops (its pipe closes; when busy and silent, it notices it was re-parented within "
            "half a second and kills its process group); no manifest.json; no job file left in the temp directory "
            "(the job goes through the child's stdin); `--force` re-run succeeds",
            (f"{f}test_sigkill_of_tftrace_itself_stops_its_worker_and_force_rerun_works",
             "test_capture_launcher.py::test_an_orphaned_child_stops_its_group_when_its_parent_is_sigkilled")),
        Row("SIGKILL to the worker child (capture; compare)", 2, "`tftrace: error: the child process running capture "
            "savedmodel [cpu, batch 4] was killed by signal 9; the tail of its stderr: … any partial output is left "
            "incomplete.` (exit 2)", "incomplete capture refused; no report.json; `--force` re-run succeeds",
            ("test_capture.py::test_a_killed_capture_leaves_an_incomplete_directory",
             f"{f}test_killed_worker_during_compare_is_reported_with_its_stderr")),
        Row("a full disk (2 MiB tmpfs) during capture", 1, "`tftrace: error: disk full at 1,845,272 bytes written to "
            "CAP (No space left on device). Free space on that file system or choose another --out; the partial capture "
            "in CAP has no manifest.json and is refused as incomplete (delete it, or re-run with --force).` (exit 2)",
            "lock released; compare refuses the capture as incomplete",
            (f"{f}test_full_disk_during_capture_says_so_and_leaves_an_incomplete_capture",)),
        Row("a hanging child (`--timeout 0.5`; a child that closed stdout; a grandchild)", 3,
            "`tftrace: error: capture savedmodel [cpu, batch 8] did not finish within --timeout 0.5 s and was stopped. "
            "Raise --timeout, or lower --examples/--batch-size.` (exit 2)", "the whole child process group stopped; "
            "no manifest.json", ("test_capture.py::test_timeout_stops_the_child",
                                 "test_capture_launcher.py::test_timeout_kills_the_whole_child_group",
                                 "test_capture_launcher.py::test_a_child_that_closes_stdout_but_keeps_running_still_meets_the_deadline")),
        Row("two captures into one directory at once (the second plain and with `--force`)", 2,
            "`tftrace: error: another capture is writing to CAP (pid N). Wait for it to finish or write elsewhere; if no "
            "capture is running, delete CAP/.lock.` (exit 2)", "the first capture finishes intact",
            (f"{f}test_two_captures_into_one_directory_one_wins_the_other_says_so",
             "test_store.py::test_second_writer_is_refused_while_the_first_holds_the_lock",
             "test_store.py::test_stale_lock_of_a_dead_process_is_taken_over_only_with_force")),
        Row("an isolation replay TensorFlow refuses (a TF1 map_fn's TensorArray gather replayed with its flow fed: "
            "'Could not read from TensorArray index 0'); a replay child that crashes", 2,
            "compare exits 1 with its report; the origin's isolation is `not_replayed`, its detail `side A's replay "
            "failed: InvalidArgumentError: …` for each side", "the report (report.json, report.html, report.md); "
            "the child's other replays; a user error in the child (a refused unsafe model) still exits 2",
            ("test_tensor_arrays.py::test_a_replay_tensorflow_refuses_is_judged_not_replayed_and_the_report_is_kept",
             "test_isolate_plan.py::test_a_crashed_replay_child_costs_the_verdicts_of_the_ops_it_had_not_answered",
             "test_isolate_plan.py::test_a_user_error_in_a_replay_child_is_still_an_error")),
        Row("a second `compare` (plain and with `--force`) into the `--out` of a running compare; the same and a "
            "`tftrace report` into an `--out` another process holds", 5, "`tftrace: error: another tftrace run (pid N) is writing to the report directory OUT. Wait for it to "
            "finish, or choose another --out.` (exit 2)", "the first run's files untouched; the lock is an flock, "
            "freed by the kernel when its holder is SIGKILLed (no stale lock)",
            (f"{f}test_two_compares_into_one_out_the_second_is_refused_naming_the_first",
             "test_out_dir.py::test_second_run_into_a_locked_out_is_refused_naming_the_first")),
        Row("TensorFlow stopping a child (an unknown flag in TF_XLA_FLAGS, for capture and for compare's B); "
            "exceptions TensorFlow raises (a feed of the wrong shape, an op failing at run time)", 3,
            "`tftrace: error: the child process running capture M [cpu, …] exited with 1: Unknown flag in "
            "TF_XLA_FLAGS: --bogus_flag. Fix what it reports (--debug shows the child's stderr) …` (exit 2); no "
            "Python stack in the line, the child's stderr after it under --debug",
            "any partial output left incomplete",
            ("test_child_errors.py::test_tensorflow_stopping_the_child_is_its_one_line",
             "test_child_errors.py::test_compare_names_the_failing_side_by_its_error",
             "test_child_errors.py::test_tensorflows_exceptions_are_said_as_tensorflow_said_them")),
    ]
    return inputs, faults


def library_rows(attacks: dict[str, Any], latent: dict[str, Any]) -> list[Row]:
    """Issue 24's function-library classes, a row each, every case by the name the tests give it."""
    lib = "test_hostile_library.py::"

    def cases(*names: str, cli: tuple[str, ...] = ()) -> tuple[str, ...]:
        assert all(name in attacks for name in names), names
        return (*(f"{lib}{test}[{name}]" for name in names for test in (
            "test_each_library_attack_is_real", "test_library_attack_is_refused_before_it_runs")), *(lib + t for t in cli))

    real = ("nothing ran: TensorFlow itself, running the model aimed at a scratch directory, writes its canary there; "
            "aimed outside, nothing appeared")
    assert sorted(attacks) == sorted(("print_placeholder", "debug_placeholder", "nested_function", "gradient_table",
                                      "defun_binds_placeholder", "main_op_placeholder", "tf2_init_placeholder"))
    return [
        Row("a file destination hidden in a function's attribute placeholder (issue 24): PrintV2 inside a library "
            "function whose `output_stream` is a placeholder, bound to `file://…` by the calling PartitionedCall", 1,
            "`tftrace: error: refusing to run M: … 'call/printer/print' (PrintV2: prints to file://…) …` (exit 2; the "
            "scan judges each function with its caller's bindings; it read the placeholder's empty value: exit 0, the "
            "file appended to)", real,
            cases("print_placeholder", cli=("test_library_attacks_through_the_cli_write_nothing",))),
        Row("the same through DebugIdentity (issue 24): `debug_urls` a placeholder bound to `file://…`", 1,
            "`… 'call/tap/dbg' (DebugIdentity: writes debug dumps to its debug_urls) …` (exit 2; a tfdbg dump was "
            "written outside `--out`)", real, cases("debug_placeholder")),
        Row("a function passed inside another call's attribute (issue 24): `PartitionedCall(f={outer, attr:{g: func "
            "evil}})`, `outer` calls `g`, `evil` a WriteFile", 1,
            "`… 'call/outer/inner/evil/write' (WriteFile: writes a file) …` (exit 2; functions nested in a "
            "`NameAttrList`'s attributes were never scanned)", real, cases("nested_function")),
        Row("the library's gradient table (issue 24): an allowed `SymbolicGradient(f=benign)` with `library.gradient` "
            "mapping `benign` to a WriteFile function", 1,
            "`… 'grad/evil_grad/write' (WriteFile: writes a file) …` (exit 2)", real, cases("gradient_table")),
        Row("a Defun-style call that binds the placeholder itself (issue 24): the node's op type is the function's "
            "name and its own attributes bind `output_stream=file://…`", 1,
            "`… 'call/printer_defun/print' (PrintV2: prints to file://…) …` (exit 2; one line was appended per run)",
            real, cases("defun_binds_placeholder")),
        Row("the same in the init path (issue 24): a TF1 SavedModel's `saved_model_main_op` calling the printer bound "
            "to `file://…`; a TF2 SavedModel whose resource initialiser calls it Defun-style (`tf.saved_model.load` "
            "runs it), through capture, compare and `diff-graph`", 2,
            "`tftrace: error: refusing to run M: … 'init_call/printer/print' (PrintV2: prints to file://…) …`; TF2: "
            "`refusing to load M: loading this TF2 SavedModel runs its resource initialisers …: '_initialize/"
            "__inference__initializer_…/init_call/printer_defun/print' (PrintV2: prints to file://…) …` (exit 2, "
            "also from `diff-graph`)", "nothing ran at load: loaded aimed at a scratch directory (a TF1 session, "
            "`tf.saved_model.load`), each writes its canary there; aimed outside, nothing appeared",
            (*cases("main_op_placeholder", "tf2_init_placeholder", cli=(
                "test_library_attacks_through_the_cli_write_nothing",)),
             f"{lib}test_a_tf2_initialiser_carrying_the_trick_is_refused_by_capture_compare_and_diff_graph")),
        Row("effects TensorFlow does not run as the model stands (issue 24: an effect whose attribute is an unresolved "
            "placeholder is refused; every function of the library is scanned, reachable or not): a PrintV2 whose "
            "`output_stream` no caller binds; a WriteFile and an unbound PrintV2 in functions nothing calls",
            len(latent), "`… 'call/printer/print' (PrintV2: its output_stream is an attribute placeholder no caller "
            "binds, so where it writes or reads is not known) …`; `… '(no caller)/stray/write' (WriteFile: writes a "
            "file) …` (exit 2; the uncalled ones passed before)", "nothing ran (TensorFlow refuses to instantiate the "
            "unbound printer, NotFoundError, and never calls the others): a call tftrace does not know of cannot run "
            "an unscanned function", tuple(f"{lib}test_latent_library_effects_are_refused[{name}]" for name in latent)),
        Row("legitimate function libraries under the bound, whole-library scan (issue 24's negative control): Keras 3 "
            "exports (`model.export`, `tf.saved_model.save`), recurrent TF2 loops (LSTM, GRU, SimpleRNN), random "
            "augmentation, tf-slim; the generated sample models and every signature of the real ones", 8 + 8 + 9,
            "nothing: they load checked (no refusal)", "their layer functions, loop bodies and saver functions pass "
            "the scan: no false refusal",
            (f"{lib}test_keras_tf2_loop_and_slim_exports_still_pass_the_scan",
             "test_safe_ops.py::test_sample_and_real_models_pass_the_check_on_every_signature")),
    ]


def render_table(rows: list[Row]) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| kind | tried | what the user saw | nothing lost | tests |", "|---|---|---|---|---|"]
    for row in rows:
        tests = "<br>".join(f"`{t}`" for t in row.tests)
        lines.append(f"| {cell(row.kind)} | {row.count} | {cell(row.seen)} | {cell(row.kept)} | {tests} |")
    total = sum(r.count for r in rows)
    lines.append(f"| **total** | **{total}** | | | |")
    return "\n".join(lines)


RELIABILITY = REPO / "RELIABILITY.md"
MARKERS = {"inputs": ("<!-- bad inputs: generated -->", "<!-- /bad inputs -->"),
           "faults": ("<!-- faults: generated -->", "<!-- /faults -->")}
README_MARKERS = ("<!-- reliability summary: generated -->", "<!-- /reliability summary -->")


def render_summary(inputs: list[Row], faults: list[Row]) -> str:
    """README's short form: what was tried, how many times; the messages are in RELIABILITY.md."""
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| | kind | tried |", "|---|---|---|"]
    for what, rows in (("bad input", inputs), ("fault", faults)):
        lines += [f"| {what} | {cell(row.kind)} | {row.count} |" for row in rows]
        lines.append(f"| | **{what}s in all** | **{sum(r.count for r in rows)}** |")
    return "\n".join(lines)


def _replace_between(text: str, start: str, end: str, body: str) -> str:
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{body}\n{end}{tail}"


def test_reliability_table_matches_the_tests() -> None:
    """RELIABILITY.md's tables and README's summary are generated from reliability_rows(); every
    row names tests that exist.

    Rewrite them with ``TFTRACE_WRITE_RELIABILITY=1 pytest tests/test_hostile.py -k reliability``.
    """
    import ast  # noqa: PLC0415

    inputs, faults = reliability_rows()
    for row in inputs + faults:
        for ref in row.tests:
            file, _, name = ref.split("[")[0].partition("::")  # a parametrised case names its function
            tree = ast.parse((REPO / "tests" / file).read_text(encoding="utf-8"))
            assert name in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}, ref
    text = RELIABILITY.read_text(encoding="utf-8")
    for key, rows in (("inputs", inputs), ("faults", faults)):
        text = _replace_between(text, *MARKERS[key], render_table(rows))
    readme = _replace_between((REPO / "README.md").read_text(encoding="utf-8"), *README_MARKERS,
                              render_summary(inputs, faults))
    if os.environ.get("TFTRACE_WRITE_RELIABILITY"):
        RELIABILITY.write_text(text, encoding="utf-8")
        (REPO / "README.md").write_text(readme, encoding="utf-8")
    assert RELIABILITY.read_text(encoding="utf-8") == text, "RELIABILITY.md is out of date: re-run with TFTRACE_WRITE_RELIABILITY=1"
    assert (REPO / "README.md").read_text(encoding="utf-8") == readme, \
        "README.md's reliability summary is out of date: re-run with TFTRACE_WRITE_RELIABILITY=1"

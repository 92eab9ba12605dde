"""Effects hidden in a model's function library (issue 24): each refused before anything runs.

The scan of issue 15 followed functions by name and read each function's attributes as written,
so an effect whose destination is an *attribute placeholder* (bound by the calling node when
TensorFlow instantiates the function), a function handed to another inside a call's
``NameAttrList``, and the library's gradient table all ran unchecked. The models here are TF1
SavedModels whose ``saved_model.pb`` carries a hand-made function library, the way the red team
built them, one attack each, aimed at a directory outside. :data:`BUILD` first proves every
attack real: the same model aimed at a scratch directory is loaded and run by TensorFlow itself
and its canary file must appear there. Then ``tftrace`` must refuse each one (exit 2, naming
the node and the op), and nothing may appear outside.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, assert_user_error, run_cli

HELPERS = r'''
import json, os, sys
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2, function_pb2, node_def_pb2, types_pb2
from tensorflow.core.protobuf import saved_model_pb2

out, outside, effects = sys.argv[1:4]
tf1 = tf.compat.v1
F, S = types_pb2.DT_FLOAT, types_pb2.DT_STRING


def clean(path):
    with tf1.Graph().as_default():
        x = tf1.placeholder(tf.float32, [None, 4], name="x")
        y = tf.identity(tf.multiply(x, tf.constant(2.0, name="scale"), name="mul"), name="y")
        with tf1.Session() as sess:
            builder = tf1.saved_model.Builder(path)
            sig = tf1.saved_model.signature_def_utils.predict_signature_def({"x": x}, {"y": y})
            builder.add_meta_graph_and_variables(sess, ["serve"], signature_def_map={"serving_default": sig})
            builder.save()


def attr(**kw):
    return attr_value_pb2.AttrValue(**kw)


def node(name, op, inputs=(), **attrs):
    return node_def_pb2.NodeDef(name=name, op=op, input=list(inputs), attr=attrs)


def const_s(name, text):
    return node(name, "Const", dtype=attr(type=S), value=attr(tensor=tf.make_tensor_proto(text)))


def function(name, body, ret, attrs=(), inputs=(("v", F),), outputs=(("out", F),)):
    fn = function_pb2.FunctionDef()
    fn.signature.name = name
    fn.signature.is_stateful = True
    for arg, dtype in inputs:
        fn.signature.input_arg.add(name=arg, type=dtype)
    for arg, dtype in outputs:
        fn.signature.output_arg.add(name=arg, type=dtype)
    for attr_name, attr_type in attrs:
        fn.signature.attr.add(name=attr_name, type=attr_type)
    fn.node_def.extend(body)
    fn.ret.update(ret)
    return fn


def printer(name="printer"):  # PrintV2 whose stream is the placeholder "stream"
    return function(name, [
        node("fmt", "StringFormat", ["v"], T=attr(list=attr_value_pb2.AttrValue.ListValue(type=[F])),
             template=attr(s=b"{}"), placeholder=attr(s=b"{}"), summarize=attr(i=3)),
        node("print", "PrintV2", ["fmt:output:0"], output_stream=attr(placeholder="stream"), end=attr(s=b"\n")),
        node("pass", "Identity", ["v", "^print"], T=attr(type=F)),
    ], {"out": "pass:output:0"}, attrs=[("stream", "string")])


def tap():  # DebugIdentity whose debug_urls are the placeholder "urls"
    return function("tap", [
        node("dbg", "DebugIdentity", ["v"], T=attr(type=F), tensor_name=attr(s=b"x:0"),
             debug_urls=attr(placeholder="urls")),
    ], {"out": "dbg:output:0"}, attrs=[("urls", "list(string)")])


def writer(name, path):  # WriteFile of a constant path, its input passed through
    return function(name, [
        const_s("path", path), const_s("text", "pwned"),
        node("write", "WriteFile", ["path:output:0", "text:output:0"]),
        node("pass", "Identity", ["v", "^write"], T=attr(type=F)),
    ], {"out": "pass:output:0"})


def calls(f_name, inputs=("x",), **f_attrs):
    return dict(args=attr(), Tin=attr(list=attr_value_pb2.AttrValue.ListValue(type=[F])),
                Tout=attr(list=attr_value_pb2.AttrValue.ListValue(type=[F])),
                f=attr(func=attr_value_pb2.NameAttrList(name=f_name, attr=f_attrs)))


def partitioned(name, f_name, inputs=("x",), **f_attrs):
    a = calls(f_name, **f_attrs)
    del a["args"]
    return node(name, "PartitionedCall", inputs, **a)


def graft(path, functions, nodes, gradients=(), main_op=None):
    """Add functions and nodes to a clean model's graph; y is then the last node's output."""
    pb = os.path.join(path, "saved_model.pb")
    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString(open(pb, "rb").read())
    meta = saved.meta_graphs[0]
    meta.graph_def.library.function.extend(functions)
    for fn_name, grad in gradients:
        meta.graph_def.library.gradient.add(function_name=fn_name, gradient_func=grad)
    meta.graph_def.node.extend(nodes)
    if main_op is not None:
        meta.collection_def["saved_model_main_op"].node_list.value.append(main_op)
    else:
        y = next(n for n in meta.graph_def.node if n.name == "y")
        y.input[0] = nodes[-1].name
    open(pb, "wb").write(saved.SerializeToString())


def file_url(where, name):
    return ("file://" + os.path.join(where, name)).encode()


def attacks(where):
    """name -> (functions, nodes, gradients, main op) aimed at directory ``where``."""
    grad_in = dict(Tin=attr(list=attr_value_pb2.AttrValue.ListValue(type=[F, F])),
                   Tout=attr(list=attr_value_pb2.AttrValue.ListValue(type=[F])))
    evil_grad = function("evil_grad", [
        const_s("path", os.path.join(where, "gradient.txt")), const_s("text", "pwned"),
        node("write", "WriteFile", ["path:output:0", "text:output:0"]),
        node("pass", "Identity", ["dy", "^write"], T=attr(type=F)),
    ], {"out": "pass:output:0"}, inputs=(("v", F), ("dy", F)))
    benign = function("benign", [node("twice", "Mul", ["v", "v"], T=attr(type=F))], {"out": "twice:z:0"})
    outer = function("outer", [
        partitioned("inner", None, ("v",)),
    ], {"out": "inner:output:0"}, attrs=[("g", "func")])
    outer.node_def[0].attr["f"].CopyFrom(attr(placeholder="g"))
    return {
        "print_placeholder": ([printer()], [partitioned("call", "printer", stream=attr(s=file_url(where, "printed.txt")))],
                              (), None),
        "debug_placeholder": ([tap()], [partitioned("call", "tap", urls=attr(
            list=attr_value_pb2.AttrValue.ListValue(s=[file_url(where, "tfdbg")])))], (), None),
        "nested_function": ([outer, writer("evil", os.path.join(where, "nested.txt"))],
                            [partitioned("call", "outer", g=attr(func=attr_value_pb2.NameAttrList(name="evil")))], (), None),
        "gradient_table": ([benign, evil_grad], [node("dy", "OnesLike", ["x"], T=attr(type=F)),
                                                 node("grad", "SymbolicGradient", ["x", "dy"],
                                                      f=attr(func=attr_value_pb2.NameAttrList(name="benign")), **grad_in)],
                           [("benign", "evil_grad")], None),
        "defun_binds_placeholder": ([printer("printer_defun")], [node("call", "printer_defun", ["x"],
                                                                      stream=attr(s=file_url(where, "defun.txt")))], (), None),
        "main_op_placeholder": ([printer()], [node("seed", "Const", dtype=attr(type=F),
                                                   value=attr(tensor=tf.make_tensor_proto(1.0))),
                                              partitioned("init_call", "printer", ("seed",),
                                                          stream=attr(s=file_url(where, "main_op.txt")))],
                                (), "init_call"),
    }

'''

BUILD = HELPERS + r'''
tf1.disable_eager_execution()


def run(path):
    with tf1.Graph().as_default(), tf1.Session() as sess:
        meta = tf1.saved_model.loader.load(sess, ["serve"], path)  # runs the main op
        sig = meta.signature_def["serving_default"]
        sess.run(sig.outputs["y"].name, {sig.inputs["x"].name: [[1.0, 2.0, 3.0, 4.0]]})


clean(os.path.join(out, "clean"))  # x, scale -> mul -> y: the graph test_fuzz's synthetic captures record
# a model printing tftrace's own events to stdout (PrintV2 to stdout is allowed): a bare progress, then an error
def printing(name, said):
    """The clean model, printing ``said`` to stdout on every run (PrintV2 to stdout is allowed)."""
    clean(os.path.join(out, name))
    graft(os.path.join(out, name), [], [
        const_s("said", said), node("say", "PrintV2", ["said"], output_stream=attr(s=b"stdout"), end=attr(s=b"\n")),
        node("passed", "Identity", ["mul", "^say"], T=attr(type=F))])


printing("prints_events", '{"event": "progress"}\n{"event": "error", "problem": "the model says it is unsafe", '
                          '"fix": "re-run with --allow-unsafe-ops"}')


def strings_model(path, build):
    """x -> y = 2x, y also waiting on string tensors built from a 1 KB constant."""
    with tf1.Graph().as_default():
        x = tf1.placeholder(tf.float32, [None, 4], name="x")
        texts = build()
        lengths = [tf.reduce_sum(tf.strings.length(text)) for text in (texts if isinstance(texts, list) else [texts])]
        y = tf.identity(x * 2.0 + 0.0 * tf.cast(tf.add_n(lengths), tf.float32), name="y")
        with tf1.Session() as sess:
            builder = tf1.saved_model.Builder(path)
            sig = tf1.saved_model.signature_def_utils.predict_signature_def({"x": x}, {"y": y})
            builder.add_meta_graph_and_variables(sess, ["serve"], signature_def_map={"serving_default": sig})
            builder.save()


def long_string(n, name=None):  # one string of n KB, joined at run time from a 1 KB constant
    return tf.strings.reduce_join(tf.fill([n], tf.constant("k" * 1000)), name=name or f"long_{n}")


strings_model(os.path.join(out, "wide_strings"), lambda: tf.concat(
    [tf.reshape(long_string(917), [1]), tf.fill([2047], "")], 0, name="wide"))
strings_model(os.path.join(out, "megabyte_string"), lambda: long_string(1200))
# 16 scalar strings of 40 MB each (and the 40 MB [40000] tensors they are joined from)
strings_model(os.path.join(out, "sixteen_strings"), lambda: [long_string(40000, f"long_{i}") for i in range(16)])

made = {}
for where, suffix in ((effects, "_live"), (outside, "")):
    for name, (functions, nodes, gradients, main_op) in attacks(where).items():
        path = os.path.join(out, name + suffix)
        clean(path)
        graft(path, functions, nodes, gradients, main_op)
        if suffix:
            before = set(os.listdir(effects))
            run(path)
            made[name] = sorted(set(os.listdir(effects)) - before)


def latent(where):
    """name -> (functions, nodes): effects TensorFlow does not run as the model stands, which the
    scan must refuse all the same (what tftrace takes for unreachable or unbound it may misjudge)."""
    passed = node("passed", "Identity", ["mul"], T=attr(type=F))
    return {
        # PrintV2's output_stream is a placeholder its only caller never binds
        "unbound_placeholder": ([printer()], [partitioned("call", "printer")]),
        # functions in the library that no node and no other function calls
        "uncalled_write": ([writer("stray", os.path.join(where, "uncalled.txt"))], [passed]),
        "uncalled_print": ([printer("stray_printer")], [passed]),
    }


for where, suffix in ((effects, "_live"), (outside, "")):
    for name, (functions, nodes) in latent(where).items():
        path = os.path.join(out, name + suffix)
        clean(path)
        graft(path, functions, nodes)
        if suffix:
            before = set(os.listdir(effects))
            try:
                run(path)
                ran = "ran"
            except Exception as exc:  # TensorFlow refusing to instantiate the function
                ran = type(exc).__name__
            made[name] = [ran, *sorted(set(os.listdir(effects)) - before)]

# a model printing what a diagnose timing child answers (PrintV2 to stdout): a time, then an error
printing("prints_timings", '{"event": "ready"}\n{"event": "time", "ms": 0.125}\n{"event": "error", '
                           '"problem": "the model says it cannot be timed", "fix": "re-run with --allow-unsafe-ops"}')
json.dump(made, open(os.path.join(out, "effects.json"), "w"))
'''

BUILD_TF2 = HELPERS + r'''
# TF2 SavedModels (eager): the trick in what tf.saved_model.load runs, a resource's initialiser
class Table(tf.saved_model.experimental.TrackableResource):
    def _create_resource(self):
        return tf.raw_ops.HashTableV2(key_dtype=tf.string, value_dtype=tf.int64)

    def _initialize(self):
        return tf.raw_ops.InitializeTableV2(table_handle=self.resource_handle, keys=tf.constant(["a"]),
                                            values=tf.constant([1], tf.int64))


class Doubler(tf.Module):
    def __init__(self):
        self.table = Table()

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
    def f(self, x):
        return {"y": x * 2.0}


def tf2_graft(path, role, functions, nodes):
    """Save a clean TF2 model, then add ``nodes`` to the body of the function the object graph
    names for ``role``, run before its result (a control edge into its NoOp)."""
    module = Doubler()
    tf.saved_model.save(module, path, signatures={"serving_default": module.f})
    pb = os.path.join(path, "saved_model.pb")
    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString(open(pb, "rb").read())
    meta = saved.meta_graphs[0]
    objects = meta.object_graph_def.nodes
    target = next(objects[c.node_id].function.concrete_functions[0] for o in objects for c in o.children
                  if c.local_name == role)
    body = next(f for f in meta.graph_def.library.function if f.signature.name == target)
    body.node_def.extend(nodes)
    next(n for n in body.node_def if n.op == "NoOp").input.append("^" + nodes[-1].name)
    meta.graph_def.library.function.extend(functions)
    open(pb, "wb").write(saved.SerializeToString())


def tf2_attacks(where):
    """name -> (role, functions, nodes). A Defun-style call in the initialiser binds the printer's
    placeholder with its own attributes. (A PartitionedCall binding it there does not run under
    TF 2.21's loader: 'Attr stream is not found'; the scan refuses it as well.)"""
    seed = node("seed", "Const", dtype=attr(type=F), value=attr(tensor=tf.make_tensor_proto(1.0)))
    return {"tf2_init_placeholder": ("_initialize", [printer("printer_defun")], [
        seed, node("init_call", "printer_defun", ["seed:output:0"], stream=attr(s=file_url(where, "tf2_init.txt")))])}


made = {}
for where, suffix in ((effects, "_live"), (outside, "")):
    for name, (role, functions, nodes) in tf2_attacks(where).items():
        path = os.path.join(out, name + suffix)
        tf2_graft(path, role, functions, nodes)
        if suffix:
            before = set(os.listdir(effects))
            tf.saved_model.load(path)  # runs the resource initialisers
            made[name] = sorted(set(os.listdir(effects)) - before)
json.dump(made, open(os.path.join(out, "effects_tf2.json"), "w"))
'''

# attack -> (the canary TensorFlow writes when it runs it, the fragments the refusal names)
ATTACKS: dict[str, tuple[str, tuple[str, ...]]] = {
    "print_placeholder": ("printed.txt", ("'call/printer/print' (PrintV2: prints to file://",)),
    "debug_placeholder": ("tfdbg", ("'call/tap/dbg' (DebugIdentity: writes debug dumps to its debug_urls)",)),
    "nested_function": ("nested.txt", ("'call/outer/inner/evil/write' (WriteFile: writes a file)",)),
    "gradient_table": ("gradient.txt", ("'grad/evil_grad/write' (WriteFile: writes a file)",)),
    "defun_binds_placeholder": ("defun.txt", ("'call/printer_defun/print' (PrintV2: prints to file://",)),
    "main_op_placeholder": ("main_op.txt", ("'init_call/printer/print' (PrintV2: prints to file://",)),
    "tf2_init_placeholder": ("tf2_init.txt", ("'_initialize/__inference__initializer_",
                                              "/init_call/printer_defun/print' (PrintV2: prints to file://")),
}
# effects TensorFlow does not run as the model stands -> (what TensorFlow does running it, the refusal)
LATENT: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "unbound_placeholder": (["NotFoundError"], ("'call/printer/print' (PrintV2: its output_stream is an "
                                                       "attribute placeholder no caller binds",)),
    "uncalled_write": (["ran"], ("'(no caller)/stray/write' (WriteFile: writes a file)",)),
    "uncalled_print": (["ran"], ("'(no caller)/stray_printer/print' (PrintV2: its output_stream is an attribute "
                                 "placeholder no caller binds",)),
}


@pytest.fixture(scope="module")
def library_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("library")
    for part in ("models", "outside", "effects"):
        (root / part).mkdir()
    for script in (BUILD, BUILD_TF2):
        subprocess.run([sys.executable, "-c", script, str(root / "models"), str(root / "outside"), str(root / "effects")],
                       cwd=REPO, check=True, capture_output=True, timeout=300, env={**os.environ, "CUDA_VISIBLE_DEVICES": "-1"})
    effects = {name: made for part in ("effects.json", "effects_tf2.json")
               for name, made in json.loads((root / "models" / part).read_text()).items()}
    return {"root": root, "effects": effects}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_each_library_attack_is_real(name: str, library_models: dict[str, Any]) -> None:
    """TensorFlow itself, loading and running the model aimed at a scratch directory, makes the canary."""
    canary, _ = ATTACKS[name]
    assert library_models["effects"][name] == [canary]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_library_attack_is_refused_before_it_runs(name: str, library_models: dict[str, Any]) -> None:
    from tracer.artifacts.loader import ArtifactRef  # noqa: PLC0415
    from tracer.captures.runtime import load_checked  # noqa: PLC0415 - imports TensorFlow (lazily)
    from tracer.errors import TftraceError  # noqa: PLC0415
    from tracer.runspec import Side  # noqa: PLC0415

    location = library_models["root"] / "models" / name
    with pytest.raises(TftraceError) as refused:
        load_checked(Side(ArtifactRef(str(location))))
    message = str(refused.value)
    assert message.startswith(_refusal(location, name)), message
    for fragment in ATTACKS[name][1]:
        assert fragment in message, (fragment, message)
    assert os.listdir(library_models["root"] / "outside") == []


def _refusal(location: Path, name: str) -> str:
    """A TF2 SavedModel is refused before ``tf.saved_model.load``, a TF1 graph before its session runs."""
    return f"refusing to {'load' if name.startswith('tf2') else 'run'} {location}: "


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(LATENT))
def test_latent_library_effects_are_refused(name: str, library_models: dict[str, Any]) -> None:
    """Effects TensorFlow does not run as the model stands: a PrintV2 whose output_stream no caller
    binds (TensorFlow refuses to instantiate it), and functions no call edge reaches (never called).
    The scan refuses them all the same: an effect whose destination is unknown is refused, and
    every function of the library is scanned, reachable or not (issue 24), so that a call edge
    tftrace does not know of cannot run an unscanned function."""
    from tracer.artifacts.loader import ArtifactRef  # noqa: PLC0415
    from tracer.captures.runtime import load_checked  # noqa: PLC0415 - imports TensorFlow (lazily)
    from tracer.errors import TftraceError  # noqa: PLC0415
    from tracer.runspec import Side  # noqa: PLC0415

    ran, fragments = LATENT[name]
    assert library_models["effects"][name] == ran  # no canary: TensorFlow itself does not run the effect
    location = library_models["root"] / "models" / name
    with pytest.raises(TftraceError) as refused:
        load_checked(Side(ArtifactRef(str(location))))
    message = str(refused.value)
    assert message.startswith(_refusal(location, name)), message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


@pytest.mark.slow
def test_library_attacks_through_the_cli_write_nothing(library_models: dict[str, Any], tmp_path: Path) -> None:
    models = library_models["root"] / "models"
    for name in ("print_placeholder", "main_op_placeholder"):
        proc = run_cli("capture", str(models / name), "--out", str(tmp_path / name), "--examples", "2")
        assert_user_error(proc, f"refusing to run {models / name}: ", *ATTACKS[name][1], "pass --allow-unsafe-ops")
        assert not (tmp_path / name).exists()
    assert os.listdir(library_models["root"] / "outside") == []


@pytest.mark.slow
def test_a_tf2_initialiser_carrying_the_trick_is_refused_by_capture_compare_and_diff_graph(
        library_models: dict[str, Any], tmp_path: Path) -> None:
    """A TF2 SavedModel whose resource initialiser calls the printer Defun-style, binding its
    output_stream to ``file://``: ``tf.saved_model.load`` runs it, and every command that reads a
    TF2 model loads it (``diff-graph`` too, to inline its signature)."""
    models, name = library_models["root"] / "models", "tf2_init_placeholder"
    model = str(models / name)
    runs = {"capture": ("capture", model, "--out", str(tmp_path / "cap"), "--examples", "2"),
            "compare": ("compare", model, model, "--out", str(tmp_path / "cmp"), "--examples", "2"),
            "diff-graph": ("diff-graph", model, model)}
    for command, args in runs.items():
        proc = run_cli(*args)
        assert_user_error(proc, _refusal(models / name, name), *ATTACKS[name][1], "pass --allow-unsafe-ops")
        assert os.listdir(library_models["root"] / "outside") == [], command
    assert not (tmp_path / "cap").exists() and not (tmp_path / "cmp" / "report.json").exists()


@pytest.mark.slow
def test_keras_tf2_loop_and_slim_exports_still_pass_the_scan(keras_models: Path, slim_models: Path) -> None:
    """No false refusals from the bound scan: Keras 3 exports (``model.export`` and
    ``tf.saved_model.save``, recurrent layers whose loops are functional Whiles over function
    bodies, random augmentation with its seed state) and tf-slim's TF1 SavedModel load checked.
    The generated sample models and the real ones are test_safe_ops's negative control."""
    from tracer.artifacts.loader import ArtifactRef  # noqa: PLC0415
    from tracer.captures.runtime import load_checked  # noqa: PLC0415 - imports TensorFlow (lazily)
    from tracer.runspec import Side  # noqa: PLC0415

    paths = [keras_models / name for name in ("export", "tfsave", "lstm", "lstm_tfsave", "gru", "simple_rnn", "augment")]
    kinds = [load_checked(Side(ArtifactRef(str(path)))).kind for path in [*paths, slim_models / "savedmodel"]]
    assert kinds == ["saved_model_v2"] * len(paths) + ["saved_model_v1"]


def _env_attack(tmp_path: Path) -> dict[str, str]:
    dumps = tmp_path / "dumps"
    return {"TF_DUMP_GRAPH_PREFIX": str(dumps), "ONEDNN_JIT_DUMP": "1", "XLA_FLAGS": f"--xla_dump_to={dumps}",
            "TF_XLA_FLAGS": "--tf_xla_auto_jit=2 --tf_xla_clustering_debug",
            "CUDA_INJECTION64_PATH": str(tmp_path / "inject.so"), "TF_ENABLE_ONEDNN_OPTS": "0"}


ENV_REFUSED = ("the side to replay asks for CUDA_INJECTION64_PATH, ONEDNN_JIT_DUMP, TF_DUMP_GRAPH_PREFIX, TF_XLA_FLAGS, "
               "XLA_FLAGS in the child's environment, as recorded in a capture or report file", "export CUDA_INJECTION64_PATH=")


@pytest.mark.slow
def test_isolation_takes_no_dump_or_injection_environment_from_a_capture(library_models: dict[str, Any],
                                                                         tmp_path: Path) -> None:
    """A received capture names a model on this machine and records dump and code-loading variables
    among its side's ``--env``; compare's isolation replay (and ``tftrace isolate --from`` with the
    report's job file) would start the child with them."""
    from test_fuzz import synthetic  # noqa: PLC0415 - the TF-free capture pair of the reader tests
    from tracer.comparison.isolate import isolate_remote  # noqa: PLC0415
    from tracer.errors import TftraceError  # noqa: PLC0415

    model = str(library_models["root"] / "models" / "clean")
    b = synthetic(tmp_path / "b", 2.001, "/nonexistent/model_b")
    a = synthetic(tmp_path / "a", 2.0, model, env=_env_attack(tmp_path))
    proc = run_cli("compare", str(a), str(b), "--out", str(tmp_path / "refused"))
    assert_user_error(proc, *ENV_REFUSED)
    assert not (tmp_path / "dumps").exists() and not (tmp_path / "refused").exists()
    # the same side, its model elsewhere: the job file the report keeps is refused by `tftrace isolate` here
    away = synthetic(tmp_path / "away", 2.0, "/nonexistent/model_a", env=_env_attack(tmp_path))
    proc = run_cli("compare", str(away), str(b), "--out", str(tmp_path / "report"))
    assert proc.returncode == 1, proc.stderr
    with pytest.raises(TftraceError) as refused:
        isolate_remote(model, str(tmp_path / "report"), "a")
    assert all(fragment in str(refused.value) for fragment in ENV_REFUSED), str(refused.value)
    # a knob tftrace sets, with a value it does not take, is refused too
    odd = synthetic(tmp_path / "odd", 2.0, model, env={"TF_ENABLE_ONEDNN_OPTS": "1 --xla_dump_to=/tmp"})
    assert_user_error(run_cli("compare", str(odd), str(b), "--out", str(tmp_path / "odd_report")),
                      "the side to replay asks for TF_ENABLE_ONEDNN_OPTS in the child's environment")
    assert not (tmp_path / "dumps").exists()


@pytest.mark.slow
def test_isolation_still_replays_tftraces_own_knobs_from_a_capture(library_models: dict[str, Any],
                                                                   tmp_path: Path) -> None:
    """The negative control: the knobs tftrace records (oneDNN, autotune, XLA's auto-jit, log level)
    replay as before."""
    from test_fuzz import synthetic  # noqa: PLC0415

    model = str(library_models["root"] / "models" / "clean")
    env = {"TF_ENABLE_ONEDNN_OPTS": "0", "TF_CPP_MIN_LOG_LEVEL": "3", "TF_XLA_FLAGS": "--tf_xla_auto_jit=-1"}
    a = synthetic(tmp_path / "a", 2.0, model, env=env)
    b = synthetic(tmp_path / "b", 2.001, "/nonexistent/model_b")
    proc = run_cli("compare", str(a), str(b), "--out", str(tmp_path / "report"))
    assert proc.returncode == 1, proc.stderr
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["first_divergence"]["node"] == "scale"


@pytest.mark.slow
def test_a_model_printing_tftraces_events_to_stdout_is_not_heard(library_models: dict[str, Any], tmp_path: Path) -> None:
    """The child's events travel on a pipe of their own; what the model prints to stdout goes with
    the child's stderr. Before, the model's ``error`` line was tftrace's error (exit 2, telling the
    user to pass --allow-unsafe-ops) and a bare ``progress`` line crashed the parent (KeyError)."""
    model = library_models["root"] / "models" / "prints_events"
    proc = run_cli("capture", str(model), "--out", str(tmp_path / "cap"), "--examples", "2")
    assert proc.returncode == 0, proc.stderr
    assert "allow-unsafe-ops" not in proc.stderr and "Traceback" not in proc.stderr
    manifest = json.loads((tmp_path / "cap" / "manifest.json").read_text())
    assert manifest["examples"]["count"] == 2


@pytest.mark.slow
def test_a_model_printing_timing_events_to_stdout_is_not_heard_by_diagnoses_timer(library_models: dict[str, Any],
                                                                                   tmp_path: Path) -> None:
    """diagnose times each cost in children of its own (tracer.diagnosis.interleave), which answer
    ``ready`` and ``time`` events. The model prints ``ready``, a ``time`` of 0.125 ms and an
    ``error`` on stdout at every run: before the timing children got the private pipe, the first
    was taken for the child's readiness, the second for a timing, the third for the child's error."""
    from tracer.artifacts.loader import ArtifactRef  # noqa: PLC0415
    from tracer.captures.launcher import capture  # noqa: PLC0415
    from tracer.diagnosis.interleave import Timer  # noqa: PLC0415
    from tracer.runspec import InputSpec, Side  # noqa: PLC0415

    model = library_models["root"] / "models" / "prints_timings"
    side = Side(artifact=ArtifactRef(str(model)), batch_size=2, inputs=InputSpec(seed=0, examples=2), timing_runs=1)
    cap = capture(side, tmp_path / "cap", force=True)
    with Timer(tmp_path / "timing") as timer:  # raises TimingFailed with the model's words if it hears them
        times_a, times_b, _ = timer.time_pair(("a", side, cap), ("b", side, cap), 6)
    assert len(times_a) == len(times_b) == 6
    assert 0.125 not in times_a + times_b and min(times_a + times_b) > 0


@pytest.mark.slow
def test_a_wide_string_tensor_is_sized_by_its_contents_before_it_is_stored(library_models: dict[str, Any],
                                                                           tmp_path: Path) -> None:
    """A ``[2048]`` string tensor with one 917 KB element, stored fixed-width, is 1.8 GB: its
    step statistics counted only the header, and 1.8 GB went to disk under --max-memory 50000000."""
    model = library_models["root"] / "models" / "wide_strings"
    proc = run_cli("capture", str(model), "--out", str(tmp_path / "cap"), "--examples", "2", "--max-memory", "50000000")
    assert_user_error(proc, "tensor wide:0 is 1,878,016,000 bytes per run by its strings' lengths (sized before it "
                      "was fetched), more than --max-memory 50,000,000; nothing of it was fetched")
    assert not (tmp_path / "cap" / "manifest.json").exists()


# runs a command; prints its exit status, then the peak resident memory (KB) of the largest process under it
PEAK = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
        "print(p.returncode); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.stderr.write(p.stderr)")
PLAIN_RUN = r"""
import sys, numpy as np, tensorflow as tf
tf1 = tf.compat.v1
with tf1.Session(graph=tf1.Graph()) as sess:
    sig = tf1.saved_model.loader.load(sess, ["serve"], sys.argv[1]).signature_def["serving_default"]
    sess.run(sig.outputs["y"].name, {sig.inputs["x"].name: np.ones([2, 4], np.float32)})
"""


def _peak(*command: str) -> tuple[int, int, str]:
    """(exit status, peak resident KB of the largest process, stderr) of a command run on the CPU, oneDNN off."""
    proc = subprocess.run([sys.executable, "-c", PEAK, *command], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": "-1", "TF_ENABLE_ONEDNN_OPTS": "0", "COLUMNS": "200"})
    code, peak = proc.stdout.split()[:2]
    return int(code), int(peak), proc.stderr


@pytest.mark.slow
def test_sixteen_strings_of_40_mb_are_refused_within_the_memory_the_model_itself_takes(
        library_models: dict[str, Any], tmp_path: Path) -> None:
    """16 scalar strings of 40 MB, each joined at run time from a 1 KB constant: their step
    statistics count only a header, so all of them (and the 40 MB tensors they are joined from)
    were fetched in one session.run, and fetched apart each stayed in the session as a constant
    Grappler folded: 2.5 GB at the peak, exit 0, under --max-memory 50000000. Sized before they
    are fetched, they are refused using no more memory than running the model plainly does."""
    model = str(library_models["root"] / "models" / "sixteen_strings")
    _, plain, _ = _peak(sys.executable, "-c", PLAIN_RUN, model)
    code, peak, stderr = _peak(sys.executable, "-m", "tracer.cli", "capture", model, "--out", str(tmp_path / "cap"),
                               "--examples", "2", "--max-memory", "50000000")
    assert code == 2, stderr
    assert "the string tensors that do not depend on the inputs take 1,280,016,000 bytes in all (48 of them" in stderr
    assert "more than --max-memory 50,000,000" in stderr and "Traceback" not in stderr
    assert not (tmp_path / "cap" / "manifest.json").exists()
    assert peak < plain + 300_000, (peak, plain)  # KB: what tftrace adds to the model's own run


@pytest.mark.slow
def test_a_string_of_a_megabyte_is_captured_and_read_back(library_models: dict[str, Any], tmp_path: Path) -> None:
    """Any string of 1,000,000 bytes or more was written, then tftrace refused its own capture
    (``stored dtype '|S4194304' does not hold string``)."""
    from tracer.captures import Capture  # noqa: PLC0415

    model = library_models["root"] / "models" / "megabyte_string"
    proc = run_cli("capture", str(model), "--out", str(tmp_path / "cap"), "--examples", "2")
    assert proc.returncode == 0, proc.stderr
    value = Capture.open(tmp_path / "cap").tensor("ReduceJoin/long_1200:0")
    assert value.dtype.kind == "S" and len(value.item()) == 1_200_000 and value.item()[:3] == b"kkk"

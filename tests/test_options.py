"""Options declared once (tracer/options.py): the CLI's groups, the API's keywords, the Side they
build and the manifest field they land in all come from one table; a permission is never recorded;
"batched alike" has one definition. No TensorFlow here: nothing is run."""

from __future__ import annotations

import argparse
import re

import pytest

import tracer
from tracer.captures.inputs import batched_alike, run_batch_size
from tracer.cli import build_parser, side_from_args
from tracer.errors import TftraceError
from tracer.options import GROUPS, OPTIONS, api_keywords, build_side, options_for
from tracer.runspec import Side, job_side

COMMANDS = ("diff-graph", "capture", "compare", "isolate", "diagnose")

# One value per API keyword of a side option (not its default), and what the manifest then holds.
SAMPLES = {
    "tag": ("serve,gpu", "serve,gpu"),
    "signature": ("predict", "predict"),
    "outputs": ("y:0,z:0", ["y:0", "z:0"]),
    "input_names": (["x:0"], ["x:0"]),
    "device": ("gpu:1", "gpu:1"),
    "batch_size": (3, 3),
    "onednn": ("off", "off"),
    "autotune": ("on", "on"),
    "determinism": (True, True),
    "tf32": ("off", "off"),
    "xla": ("on", "on"),
    "threads": ("4,2", [4, 2]),
    "grappler": ({"remapping": "off"}, {"remapping": "off"}),
    "env": ({"TF_X": "1"}, {"TF_X": "1"}),
    "timeout_s": (9.5, 9.5),
    "inputs_file": ("x.npz", "x.npz"),
    "examples": (5, 5),
    "seed": (7, 7),
    "timing_runs": (3, 3),
    "max_memory": (1000, 1000),
    "part_bytes": (500, 500),
    "max_process_memory": (3000000000, 3000000000),
    "keep_weights": (True, True),
    "tensor_format": ("npy", "npy"),
}


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
    return dict(action.choices)


def _sections(help_text: str) -> dict[str, str]:
    """A command's --help split at its group titles ("title:" alone on a line)."""
    parts = re.split(r"^(\S[^\n]*):\n", help_text, flags=re.MULTILINE)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def test_every_declared_option_is_in_its_commands_help_under_its_group() -> None:
    """Each option under its group; a per-side one marked [A/B], its --a-/--b- forms parsed but
    said once, in the per-side paragraph, not listed twice more."""
    commands = _subparsers(build_parser())
    for command in COMMANDS:
        text = commands[command].format_help()
        sections = _sections(text)
        declared = options_for(command)
        assert declared, command
        for option in declared:
            line = re.search(rf"^  --{option.name}\b.*(?:\n {{4,}}.*)*", sections[GROUPS[option.group]], re.MULTILINE)
            assert line, (command, option.name)
            assert (" ".join(line.group(0).split()).endswith("[A/B]")) == (command in option.per_side), \
                (command, option.name)
            for side in ("a", "b") if command in option.per_side else ():
                listed = "".join(v for k, v in sections.items() if k not in (GROUPS["per_side"], "examples"))
                assert not re.search(rf"^  --{side}-{option.name}\b", listed, re.MULTILINE), \
                    (command, side, option.name)
                value = [] if option.flag else [option.choices[0] if option.choices else "1"]
                args = commands[command].parse_args([f"--{side}-{option.name}", *value]
                                                    + (["x", "y"] if command in ("compare", "diff-graph") else []))
                parsed = getattr(args, f"{side}_{option.dest}")
                assert parsed in (True, *value, *(option.type(v) for v in value if option.type), value), \
                    (command, option.name, parsed)
        if any(command in o.per_side for o in OPTIONS):
            assert " ".join(sections[GROUPS["per_side"]].split()) == (
                "Every option marked [A/B] also takes the form --a-NAME or --b-NAME, which sets it for side A or B "
                "only, in place of --NAME (e.g. --a-batch-size 1 --b-batch-size 8).")
    titles = set(_sections(commands["compare"].format_help()))
    assert {GROUPS[g] for g in ("artifact", "side", "inputs", "limits", "compare", "output", "permissions",
                                "per_side")} <= titles


def test_allow_unsafe_ops_is_declared_once_with_one_help_text() -> None:
    (option,) = [o for o in OPTIONS if o.name == "allow-unsafe-ops"]
    assert set(option.commands) == set(COMMANDS) and option.manifest_field is None
    commands = _subparsers(build_parser())
    texts = {" ".join(_sections(commands[c].format_help())[GROUPS["permissions"]].split()) for c in COMMANDS}
    assert len(texts) == 1 and "never taken from a capture, report or manifest" in texts.pop()


def test_every_side_option_reaches_the_side_and_its_manifest_field() -> None:
    side_keywords = [o.api_keyword for o in OPTIONS if o.side]
    assert set(side_keywords) - {"allow_unsafe_ops", "session_config", "python"} == set(SAMPLES), \
        "add a sample for a new option"
    for option in OPTIONS:
        if not option.side or option.api_keyword not in SAMPLES:
            continue
        assert option.api_keyword in api_keywords("capture") and option.api_keyword in api_keywords("compare")
        given, recorded = SAMPLES[option.api_keyword]
        spec = build_side("m", {option.api_keyword: given}).to_json()
        value: object = {"spec": spec}
        for key in option.manifest_field.split("."):
            value = value[key]
        assert value == recorded, option.name
    spec = build_side("m", {}).to_json()
    assert spec["artifact"]["tag"] == "serve" and spec["batch_size"] is None and spec["knobs"]["onednn"] == "default"


def test_a_session_config_option_reads_the_file(tmp_path) -> None:
    path = tmp_path / "session.pbtxt"
    path.write_text("intra_op_parallelism_threads: 2\n")
    knobs = build_side("m", {"session_config": str(path)}).knobs
    assert knobs.session_config_path == str(path) and knobs.session_config_text == "intra_op_parallelism_threads: 2\n"
    with pytest.raises(TftraceError, match="cannot read session config"):
        build_side("m", {"session_config": str(tmp_path / "missing")})


def test_the_cli_and_the_api_build_the_same_side() -> None:
    args = build_parser().parse_args([
        "compare", "m", "n", "--batch-size", "4", "--a-batch-size", "1", "--onednn", "off", "--b-onednn", "on",
        "--threads", "4,2", "--grappler", "remapping=off", "--env", "TF_X=1", "--a-env", "TF_Y=2", "--tag", "serve",
        "--outputs", "y:0", "--examples", "3", "--a-timeout", "5", "--allow-unsafe-ops"])
    shared = {"batch_size": 4, "onednn": "off", "threads": (4, 2), "grappler": {"remapping": "off"},
              "env": {"TF_X": "1"}, "tag": "serve", "outputs": ["y:0"], "examples": 3, "allow_unsafe_ops": True}
    api_a = tracer._side("m", shared, {"batch_size": 1, "env": {"TF_Y": "2"}, "timeout_s": 5.0})  # noqa: SLF001
    api_b = tracer._side("n", shared, {"onednn": "on"})  # noqa: SLF001
    assert side_from_args(args, "m", "a") == api_a and side_from_args(args, "n", "b") == api_b
    assert api_a.batch_size == 1 and api_a.knobs.env == (("TF_Y", "2"),) and api_b.knobs.onednn == "on"
    assert api_a.allow_unsafe_ops and api_b.knobs.threads == (4, 2)


@pytest.mark.parametrize("call, names", [
    (lambda: tracer.capture("m", "/nonexistent/out", batchsize=2), "tracer.capture() got unknown option 'batchsize'"),
    (lambda: tracer.compare("m", "n", tolerance=1), "tracer.compare() got unknown option 'tolerance'"),
    (lambda: tracer.compare("m", "n", a_options={"atol": 1}), "tracer.compare() a_options got unknown option 'atol'"),
    (lambda: tracer.diagnose("m", "/nonexistent/out", batch_size=2),
     "tracer.diagnose() got unknown option 'batch_size'"),
])
def test_an_unknown_api_keyword_is_a_tftrace_error_naming_the_known_ones(call, names) -> None:
    with pytest.raises(TftraceError) as info:
        call()
    assert info.value.problem == names
    assert info.value.fix.startswith("use one of: tag, signature,")
    assert ("batch_sizes" in info.value.fix) == ("diagnose" in names)
    assert "batch_size" in info.value.fix or "diagnose" in names


def test_a_permission_is_passed_never_recorded() -> None:
    side = build_side("m", {"allow_unsafe_ops": True})
    assert side.allow_unsafe_ops is True and "allow_unsafe_ops" not in side.to_json()
    older = {**side.to_json(), "allow_unsafe_ops": True}  # as an older tftrace wrote its manifests
    assert Side.from_json(older).allow_unsafe_ops is False, "a manifest's flag is never read"
    assert Side.from_json(older).with_(allow_unsafe_ops=False) == Side.from_json(side.to_json())
    # the child's job carries it beside the side (tracer.captures.launcher.run_child); only true grants it
    assert job_side({"side": older}).allow_unsafe_ops is False
    assert job_side({"side": side.to_json(), "allow_unsafe_ops": True}).allow_unsafe_ops is True
    assert job_side({"side": side.to_json(), "allow_unsafe_ops": "yes"}).allow_unsafe_ops is False


def test_an_interpreter_is_passed_never_recorded() -> None:
    """--python names a program to run: like a permission, never in a manifest, report or job file."""
    side = build_side("m", {"python": "/opt/tf2.12/bin/python"})
    assert side.python == "/opt/tf2.12/bin/python" and "python" not in side.to_json()
    planted = {**side.to_json(), "python": "/tmp/evil"}  # a received capture's spec naming one
    assert Side.from_json(planted).python is None and job_side({"side": planted}).python is None
    assert "python /opt/tf2.12/bin/python" in side.label()


def test_batch_size_10_and_8_over_8_examples_is_batched_alike() -> None:
    """--a-batch-size 10 --b-batch-size 8 with 8 examples: both sides ran the 8 examples in one run.
    Before, "batched alike" was decided by runs (alike) and by the recorded batch size (10 vs 8:
    not alike), and the report said batch 10 vs 8; the batch that ran is 8 on both."""
    a = {"spec": {"batch_size": 10}, "batch_size": 10, "runs": [[0, 8]]}  # as captures were recorded before
    b = {"spec": {"batch_size": 8}, "batch_size": 8, "runs": [[0, 8]]}
    assert run_batch_size(a) == run_batch_size(b) == 8 and batched_alike(a, b)
    split = {"batch_size": 4, "runs": [[0, 4], [4, 8]]}
    assert run_batch_size(split) == 4 and not batched_alike(a, split)
    per_example = {"batch_size": 1, "runs": [[i, i + 1] for i in range(8)]}
    assert not batched_alike(per_example, b) and batched_alike(per_example, {"runs": [[i, i + 1] for i in range(8)]})
    assert run_batch_size({"batch_size": 6}) == 6 and batched_alike({"batch_size": 6}, {"batch_size": 6})


# One value per API keyword of the comparison and diagnose options (not its default).
SETTINGS = {
    "atol": 1.0, "rtol": 1.0, "tol": ["dense/MatMul=1e-4,1e-3"], "isolate": 0, "signature_map": "y=output", "repeat": 3,
    "keep_captures": True, "intermediates_decide": True, "allow_unsafe_ops": True, "force": True, "savedmodel": "exported/", "batch_sizes": "2,4",
    "quick": True, "only": "batch,onednn", "serving_batching": "batching.txt", "serving_session_config": "config.txt",
    "detections": "boxes=boxes,scores=scores,classes=classes,count=valid", "python": "/opt/tf2.12/bin/python",
    "other_python": "/opt/tf2.12/bin/python",
}


def test_every_api_keyword_changes_what_its_command_builds() -> None:
    """Each keyword the API takes reaches what the command runs: the Side, the comparison's
    settings or diagnose's options (a keyword accepted and then dropped would be a silent no-op)."""
    from tracer.diagnosis.cli import diagnose_options  # noqa: PLC0415
    from tracer.options import compare_settings  # noqa: PLC0415

    samples = {**{k: given for k, (given, _) in SAMPLES.items()}, **SETTINGS}
    for command, build in (
        ("capture", lambda values: build_side("m", values)),
        ("compare", lambda values: (build_side("m", values), compare_settings(values))),
        ("diagnose", lambda values: diagnose_options("m", "out", values)),
    ):
        for keyword in api_keywords(command):
            if keyword in ("force", "session_config") and command != "diagnose":
                continue  # force is capture's and compare's own parameter; session_config: a file, tested above
            assert keyword in samples, f"add a sample for {keyword}"
            assert build({keyword: samples[keyword]}) != build({}), (command, keyword)
    settings = compare_settings({"tol": ["dense/MatMul=1e-4,1e-3"], "signature_map": {"y": "output"}})
    assert settings["tolerance"].overrides == (("dense/MatMul", 1e-4, 1e-3),) and settings["signature_map"] == {"y": "output"}
    options = diagnose_options("m", "out", {"batch_sizes": (2, 4), "only": ("onednn", "batch"), "tag": "t"})
    assert options.batch_sizes == (2, 4) and options.only == ("batch", "onednn") and options.model.tag == "t"
    with pytest.raises(TftraceError, match="is not a list of integers"):
        diagnose_options("m", "out", {"batch_sizes": "1,x"})

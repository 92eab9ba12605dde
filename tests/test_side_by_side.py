"""diff-graph loads two TF2 SavedModels in two processes at once (issue 25: a 51,000-op detector's
diff in about a minute): the result is the one a load in this process gives, a refusal reads as
it would here, a dying child is an error that names its side, and a user's script without a
``__main__`` guard runs once."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tracer.artifacts.records import ArtifactRef
from tracer.comparison import static
from tracer.errors import TftraceError

from conftest import REPO


@pytest.mark.slow
def test_two_tf2_savedmodels_diff_the_same_loaded_apart_as_loaded_here(keras_models: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = str(keras_models / "export"), str(keras_models / "bf16")
    apart = static.diff_artifacts(a, b).diff.to_json()
    monkeypatch.setattr(static, "loads_by_running", lambda ref: False)  # both loaded in this process
    here = static.diff_artifacts(a, b).diff.to_json()
    assert apart == here
    assert "cast_inserted" in {r["kind"] for r in apart["rewrites"]} and apart["matched"] > 50


def test_the_other_kinds_load_in_this_process(models: dict[str, Path]) -> None:
    assert static.loads_by_running(ArtifactRef(str(models["detector_tf2"])))
    assert not static.loads_by_running(ArtifactRef(str(models["detector"])))  # a TF1 SavedModel is parsed
    assert not static.loads_by_running(ArtifactRef(str(models["detector_ckpt"])))
    assert not static.loads_by_running(ArtifactRef("/no/such/model"))  # load says why, not this


def test_a_refusal_in_a_loading_process_reads_as_it_would_here(models: dict[str, Path]) -> None:
    model = str(models["detector_tf2"])
    with pytest.raises(TftraceError) as raised:
        static.diff_artifacts(ArtifactRef(model), ArtifactRef(model, signature="no_such_signature"))
    assert raised.value.problem == f"{model} has no signature 'no_such_signature'; it has serving_default"
    assert raised.value.fix == "choose one with --signature"


def test_a_loading_process_that_dies_is_an_error_naming_its_side(models: dict[str, Path],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    model = str(models["detector_tf2"])
    monkeypatch.setattr(sys, "executable", "/bin/false")  # a child that exits at once, saying nothing
    with pytest.raises(TftraceError) as raised:
        static.diff_artifacts(model, model)
    assert raised.value.problem == f"loading {model} failed in its process (exit status 1): no message"


def test_a_script_without_a_main_guard_runs_once(models: dict[str, Path], tmp_path: Path) -> None:
    """A multiprocessing worker would re-import the script as its main module and run it again."""
    script = tmp_path / "user_script.py"
    model = str(models["detector_tf2"])
    script.write_text(textwrap.dedent(f"""
        from tracer.comparison.static import diff_artifacts
        print("script ran")
        print("matched", diff_artifacts({model!r}, {model!r}).diff.matched)
    """), encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("script ran") == 1 and "matched 178" in proc.stdout


def test_tf2_savedmodels_on_ram_load_here_where_their_files_are(models: dict[str, Path]) -> None:
    """``ram://`` is this process's memory: a loading child would find no file there."""
    import tensorflow as tf  # noqa: PLC0415

    from test_artifacts import copy_to_gfile  # noqa: PLC0415

    copy_to_gfile(tf, models["detector_tf2"], "ram://tftrace-side-by-side/savedmodel")
    result = static.diff_artifacts("ram://tftrace-side-by-side/savedmodel", str(models["detector_tf2"]))
    assert result.diff.matched == 178 and result.diff.rewrites == []

"""Files tftrace writes, under attack (issue 15, item 3): planted links, foreign files under
``--force``, two runs into one ``--out``, an ``--out`` that is a link.

Each attack checks the three promises: exit 2 with a message naming what was wrong, nothing
written outside the directory, nothing of the user's deleted. ``tftrace report`` runs here
without TensorFlow (it re-renders a report.json), so these tests are quick.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import REPO, assert_user_error, run_cli
from tracer.captures import CaptureWriter
from tracer.errors import TftraceError
from tracer.safewrite import ASIDE, LOCK, OWNED, claim, lock_directory, open_new, output_directory, write_file

REPORT = REPO / "tests" / "fixtures" / "report_detector_planted.json"
# every name `tftrace report` writes, and its ownership record: a link planted at any of them
PLANTED = ("report.html", "report.md", "report.json", "divergence.svg", OWNED)
EVIL = "evil.pth"  # what the red team aimed at: a .pth file runs code at the next Python start


def _received(tmp_path: Path) -> tuple[Path, Path]:
    """A report directory as received from someone else, and a directory outside it."""
    rep, outside = tmp_path / "received", tmp_path / "site-packages"
    rep.mkdir()
    outside.mkdir()
    shutil.copy(REPORT, rep / "report.json")
    return rep, outside


@pytest.mark.parametrize("name", PLANTED)
def test_planted_link_in_a_received_report_is_refused(name: str, tmp_path: Path) -> None:
    rep, outside = _received(tmp_path)
    if name == "report.json":  # the link is also what is read: point it at a real report outside
        shutil.copy(REPORT, outside / EVIL)
        (rep / name).unlink()
    if name == OWNED:
        (rep / "report.html").write_text("old")  # a directory carrying a record claims what it writes
        (outside / EVIL).write_text("x")
    before = {p.name: p.read_bytes() for p in outside.iterdir()}
    (rep / name).symlink_to(outside / EVIL)
    proc = run_cli("report", str(rep))
    assert_user_error(proc, f"{rep / name} is a symbolic link; tftrace never writes through a link",
                      f"elete the link {rep / name} (or use another directory) and re-run")
    assert {p.name: p.read_bytes() for p in outside.iterdir()} == before  # nothing created or changed outside
    assert (rep / name).is_symlink()
    assert not list(rep.glob(".*.tmp")) and not (rep / LOCK).exists()  # no temp file or lock left


def test_planted_link_at_the_old_predictable_temp_name_is_never_used(tmp_path: Path) -> None:
    """``.report.json.tmp`` was the temp name before: now temp names are random and created
    with O_EXCL|O_NOFOLLOW, so a link planted there is neither followed nor replaced."""
    rep, outside = _received(tmp_path)
    for name in (".report.json.tmp", ".report.html.tmp", ".report.md.tmp", "report.json.tmp"):
        (rep / name).symlink_to(outside / EVIL)
    proc = run_cli("report", str(rep))
    assert proc.returncode in (0, 1), proc.stderr
    assert list(outside.iterdir()) == []
    assert json.loads((rep / "report.json").read_text())["verdict"] == json.loads(REPORT.read_text())["verdict"]
    assert (rep / "report.html").is_file() and not (rep / "report.html").is_symlink()
    assert all((rep / n).is_symlink() for n in (".report.json.tmp", ".report.html.tmp"))


def test_manifest_and_tensor_file_are_never_written_through_a_link(tmp_path: Path) -> None:
    """The capture writer's manifest (write_file, durable) and tensor files (open_new)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    cap = tmp_path / "cap"
    (cap / "tensors").mkdir(parents=True)
    (cap / "manifest.json").symlink_to(outside / EVIL)
    (cap / "tensors" / "x.npy").symlink_to(outside / "x.npy")
    with pytest.raises(TftraceError, match="manifest.json is a symbolic link; tftrace never writes through a link"):
        write_file(cap / "manifest.json", "{}", durable=True)
    for exclusive in (True, False):
        with pytest.raises(TftraceError, match=r"x\.npy is a symbolic link"):
            open_new(cap / "tensors" / "x.npy", exclusive=exclusive)
    assert list(outside.iterdir()) == [] and not list(cap.glob(".*.tmp"))


def test_write_file_refuses_a_directory_that_is_a_link(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(TftraceError, match="link is a symbolic link"):
        write_file(tmp_path / "link" / "report.md", "x")
    shutil.copy(REPORT, real / "report.json")
    proc = run_cli("report", str(tmp_path / "link"))  # nothing written there, not even the lock
    assert_user_error(proc, f"{tmp_path / 'link'} is a symbolic link")
    assert [p.name for p in real.iterdir()] == ["report.json"]


# --------------------------------------------------------------------------- --force


def test_force_refuses_when_a_user_file_is_in_out_and_deletes_nothing(tmp_path: Path, models: dict[str, Path]) -> None:
    out = tmp_path / "report"
    with output_directory(out, False, "report"):
        write_file(out / "report.json", "{}")
        claim(out, ["captures"])  # as compare does before capturing into it
        (out / "captures" / "a").mkdir(parents=True)
    (out / "thesis.tex").write_text("years of work")
    (out / ".notes").write_text("mine too")
    proc = run_cli("compare", str(models["detector"]), str(models["detector"]), "--out", str(out), "--force")
    assert_user_error(proc, f"--force would replace {out}, but it holds files tftrace did not write there",
                      "(.notes, thesis.tex)")
    assert (out / "thesis.tex").read_text() == "years of work" and (out / ".notes").read_text() == "mine too"
    assert (out / "report.json").read_text() == "{}"


def test_force_deletes_exactly_what_tftrace_recorded(tmp_path: Path) -> None:
    out = tmp_path / "report"
    with output_directory(out, False, "report"):
        write_file(out / "report.json", "{}")
        write_file(out / "report.md", "#")
        claim(out, ["work"])
        (out / "work").mkdir()
        (out / "work" / "feeds.npz").write_bytes(b"x")
    (out / "dropped-in-meanwhile.txt").write_text("the user's")  # never claimed: --force must refuse for it
    recorded = json.loads((out / OWNED).read_text())["paths"]
    assert recorded == ["report.json", "report.md", "work"]
    (out / ".report.json.0123456789abcdef.tmp").write_text("left by a killed run")
    with pytest.raises(TftraceError, match=r"did not write there \(dropped-in-meanwhile.txt\)"):
        with output_directory(out, True, "report"):
            pass
    (out / "dropped-in-meanwhile.txt").unlink()
    with output_directory(out, True, "report"):
        assert sorted(os.listdir(out)) == [OWNED, ASIDE, LOCK]  # the old report waits there until this run ends
        assert sorted(os.listdir(out / ASIDE)) == sorted([".report.json.0123456789abcdef.tmp", OWNED, *recorded])
    assert os.listdir(out) == [OWNED]


def _old_report(out: Path) -> None:
    with output_directory(out, False, "report"):
        write_file(out / "report.json", '{"old": true}')
        claim(out, ["work"])
        (out / "work").mkdir()
        (out / "work" / "feeds.npz").write_bytes(b"old feeds")


@pytest.mark.parametrize("interruption", [KeyboardInterrupt, TftraceError])
def test_an_interrupted_force_keeps_the_old_report(tmp_path: Path, interruption: type[BaseException]) -> None:
    """Issue 27: --force over a report, interrupted, left the directory empty; the old report now
    stays until the new one is complete."""
    out = tmp_path / "report"
    _old_report(out)
    with pytest.raises(interruption):
        with output_directory(out, True, "report"):
            write_file(out / "report.json", '{"new": "half"}')
            claim(out, ["captures"])
            (out / "captures").mkdir()
            raise interruption("stopped")
    assert sorted(os.listdir(out)) == [OWNED, "report.json", "work"]
    assert json.loads((out / "report.json").read_text()) == {"old": True}
    assert (out / "work" / "feeds.npz").read_bytes() == b"old feeds"
    assert json.loads((out / OWNED).read_text())["paths"] == ["report.json", "work"]


def test_a_force_killed_midway_gets_its_old_report_back_at_the_next_run(tmp_path: Path) -> None:
    """SIGKILL leaves the old report set aside and the new one half written: the next run into the
    directory takes the half back and restores the old one before anything else."""
    out = tmp_path / "report"
    _old_report(out)
    os.mkdir(out / ASIDE)  # what the killed run had done: the old report moved aside ...
    for name in ("report.json", "work", OWNED):
        os.rename(out / name, out / ASIDE / name)
    write_file(out / OWNED, json.dumps({"tool": "tftrace", "paths": ["captures"]}))  # ... its own record
    (out / "captures").mkdir()  # ... and half a capture
    with pytest.raises(TftraceError, match="is not empty"):  # without --force: refused, and the old report is back
        with output_directory(out, False, "report"):
            pass
    assert sorted(os.listdir(out)) == [OWNED, "report.json", "work"]
    assert json.loads((out / "report.json").read_text()) == {"old": True}


def test_a_run_killed_before_its_report_is_named_as_such_and_force_replaces_it(tmp_path: Path) -> None:
    """Run s on the H200: a compare killed at the end of its call (SIGKILL) left its captures and
    examples, no report; the next run was told only "not empty". It is now told what is there."""
    out = tmp_path / "report"
    killed = textwrap.dedent(f"""
        import os, signal
        from pathlib import Path
        from tracer.safewrite import claim, output_directory, write_file
        out = Path({str(out)!r})
        with output_directory(out, False, "report"):
            claim(out, ["captures", "inputs_from_a.npy"])
            (out / "captures").mkdir()
            write_file(out / "inputs_from_a.npy", "examples")
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", killed], cwd=REPO, capture_output=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL
    with pytest.raises(TftraceError) as refused:
        with output_directory(out, False, "report"):
            pass
    assert refused.value.problem == (f"output directory {out} holds what a tftrace run that did not finish left "
                                     "there (captures, inputs_from_a.npy; no report.json)")
    assert refused.value.fix.startswith("pass --force to replace it")
    with output_directory(out, True, "report"):
        write_file(out / "report.json", "{}")
    assert sorted(os.listdir(out)) == [OWNED, "report.json"]
    # a finished report is not called unfinished
    with pytest.raises(TftraceError) as refused:
        with output_directory(out, False, "report"):
            pass
    assert refused.value.problem == f"output directory {out} is not empty"


def test_a_completed_force_leaves_only_the_new_report(tmp_path: Path) -> None:
    out = tmp_path / "report"
    _old_report(out)
    with output_directory(out, True, "report"):
        write_file(out / "report.json", '{"new": true}')
    assert sorted(os.listdir(out)) == [OWNED, "report.json"]
    assert json.loads((out / "report.json").read_text()) == {"new": True}


def test_force_on_a_directory_without_a_record_refuses(tmp_path: Path) -> None:
    out = tmp_path / "old"
    out.mkdir()
    (out / "report.json").write_text("{}")  # looks like a report, but tftrace has no record of writing it
    with pytest.raises(TftraceError, match=r"holds files tftrace did not write there \(report.json\)"):
        with output_directory(out, True, "report"):
            pass
    assert (out / "report.json").read_text() == "{}"


def test_a_record_from_elsewhere_cannot_reach_outside(tmp_path: Path) -> None:
    out, outside = tmp_path / "report", tmp_path / "home"
    outside.mkdir()
    (outside / "precious").write_text("x")
    out.mkdir()
    (out / OWNED).write_text(json.dumps({"tool": "tftrace", "paths": ["../home", "../home/precious", "/etc"]}))
    with output_directory(out, True, "report"):
        pass
    assert (outside / "precious").read_text() == "x"


# --------------------------------------------------------------------------- one run per --out


def test_second_run_into_a_locked_out_is_refused_naming_the_first(tmp_path: Path, models: dict[str, Path]) -> None:
    """A running tftrace holds the lock (here a process that took it and sleeps); a second
    compare into the same --out exits 2 naming its pid, and leaves the first one's files alone."""
    out = tmp_path / "report"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from tracer.safewrite import "
         "output_directory, write_file\nwith output_directory(Path(sys.argv[1]), False, 'report'):\n"
         "    write_file(Path(sys.argv[1]) / 'report.json', 'first')\n    print('held', flush=True)\n"
         "    time.sleep(60)", str(out)],
        cwd=REPO, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        for extra in ((), ("--force",)):
            proc = run_cli("compare", str(models["detector"]), str(models["detector"]), "--out", str(out), *extra)
            assert_user_error(proc, f"another tftrace run (pid {holder.pid}) is writing to the report directory {out}",
                              "ait for it to finish, or choose another --out")
        proc = run_cli("report", str(out))  # re-rendering into it waits its turn too
        assert proc.returncode == 2 and f"pid {holder.pid}" in proc.stderr
        assert (out / "report.json").read_text() == "first"
    finally:
        holder.kill()
        holder.wait()
    time.sleep(0.1)
    with lock_directory(out):  # the kernel freed the SIGKILLed holder's lock: no stale lock to delete
        pass


def test_out_that_is_a_link_is_refused_clearly(tmp_path: Path, models: dict[str, Path]) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "mine.txt").write_text("x")
    (tmp_path / "out").symlink_to(target)
    for extra in ((), ("--force",)):
        for command in (("compare", str(models["detector"])), ("capture",)):
            proc = run_cli(*command, str(models["detector"]), "--out", str(tmp_path / "out"), *extra)
            assert_user_error(proc, f"--out {tmp_path / 'out'} is a symbolic link",
                              f"ass the directory it points to ({target})")
    assert [p.name for p in target.iterdir()] == ["mine.txt"]
    with pytest.raises(TftraceError, match="is a symbolic link"):
        CaptureWriter(tmp_path / "out", force=True)
    assert [p.name for p in target.iterdir()] == ["mine.txt"]


def test_a_planted_lock_file_is_never_written_into(tmp_path: Path) -> None:
    """A hard link planted at .tftrace.lock would have tftrace write its pid into the user's file."""
    out, precious = tmp_path / "received", tmp_path / "precious.txt"
    out.mkdir()
    precious.write_text("keep me")
    os.link(precious, out / LOCK)
    with pytest.raises(TftraceError, match=r"\.tftrace\.lock is not a lock file tftrace made"):
        with lock_directory(out):
            pass
    (out / LOCK).unlink()
    (out / LOCK).symlink_to(tmp_path / "planted")
    with pytest.raises(TftraceError, match=r"\.tftrace\.lock is a symbolic link"):
        with lock_directory(out):
            pass
    assert precious.read_text() == "keep me" and not (tmp_path / "planted").exists()


def test_a_failed_run_takes_back_what_it_wrote_and_keeps_the_users_files(tmp_path: Path) -> None:
    """A run that fails leaves --out as it found it: nothing half-written looks like a result, and
    the same command runs again without --force (a failed compare once left captures/ and
    inputs_from_a.npz, and the retry was refused as "not empty")."""
    made = tmp_path / "new"
    with pytest.raises(TftraceError, match="B cannot take"):
        with output_directory(made, False, "report") as out:
            write_file(out / "inputs_from_a.npz", b"examples")
            claim(out, ["captures"])
            (out / "captures" / "a").mkdir(parents=True)
            raise TftraceError("the two signatures cannot be paired: B cannot take A's examples", "map keys")
    assert not made.exists()  # this run made it: gone with what was in it

    kept = tmp_path / "theirs"
    kept.mkdir()
    with pytest.raises(KeyboardInterrupt):
        with output_directory(kept, False, "report") as out:
            write_file(out / "report.json", b"{}")
            (out / "notes.txt").write_text("the user's, written meanwhile")
            raise KeyboardInterrupt
    assert sorted(os.listdir(kept)) == ["notes.txt"]


@pytest.mark.slow
def test_a_compare_that_fails_after_its_first_capture_can_be_run_again(models: dict[str, Path],
                                                                       tmp_path: Path) -> None:
    out = tmp_path / "report"
    args = ("compare", str(models["detector"]), str(models["nan_model"]), "--out", str(out))
    first = run_cli(*args, env={"TF_ENABLE_ONEDNN_OPTS": "0"})
    assert_user_error(first, "cannot be paired")
    assert not out.exists()
    again = run_cli(*args, env={"TF_ENABLE_ONEDNN_OPTS": "0"})
    assert_user_error(again, "cannot be paired")
    # the same refusal, word for word (a loaded machine may add progress lines before it)
    said = [[line for line in proc.stderr.splitlines() if line.startswith("tftrace: ")] for proc in (first, again)]
    assert said[0] == said[1] and len(said[0]) == 1

"""The folder one command's processes share their lowered graphs through
(tracer.artifacts.lowered_folder): named to the children, made only when a graph is lowered,
private, gone at the end, and swept up after a killed command."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tracer.artifacts.lowered_folder import CACHE_ENV, PREFIX, lowered_folder, shared_lowering


@pytest.fixture
def temp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A temporary directory of the test's own, and no folder named yet."""
    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_the_folder_is_made_by_the_first_lowering_private_and_removed_at_the_end(temp: Path) -> None:
    with shared_lowering():
        named = Path(os.environ[CACHE_ENV])
        assert named.parent == temp and named.name.startswith(f"{PREFIX}{os.getpid()}-")
        assert not named.exists()  # nothing made until a graph is lowered
        assert lowered_folder() == named and named.is_dir()
        assert stat.S_IMODE(named.stat().st_mode) == 0o700  # this user's processes only
        (named / "lowered.pb").write_bytes(b"graph")
        with shared_lowering():  # tftrace run by tftrace (a child): the same folder, left to its maker
            assert os.environ[CACHE_ENV] == str(named)
        assert lowered_folder() == named and (named / "lowered.pb").is_file()
    assert CACHE_ENV not in os.environ and list(temp.iterdir()) == []


def test_a_command_that_lowers_nothing_leaves_nothing_even_killed(temp: Path) -> None:
    with shared_lowering():
        pass
    assert list(temp.iterdir()) == []


def test_the_folder_is_removed_when_the_command_fails(temp: Path) -> None:
    with pytest.raises(RuntimeError), shared_lowering():
        assert lowered_folder() is not None
        raise RuntimeError("the command failed")
    assert list(temp.iterdir()) == [] and CACHE_ENV not in os.environ


def test_a_folder_named_by_the_caller_is_used_and_kept(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv(CACHE_ENV, str(folder))
    with shared_lowering():
        assert lowered_folder() == folder
    assert folder.is_dir() and os.environ[CACHE_ENV] == str(folder)


@pytest.mark.parametrize("kind", ["others may write", "a link"])
def test_a_folder_that_is_not_this_users_private_one_is_never_read(kind: str, monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    if kind == "others may write":
        real.chmod(0o777)
        named = real
    else:
        named = tmp_path / "link"
        named.symlink_to(real)
    monkeypatch.setenv(CACHE_ENV, str(named))
    assert lowered_folder() is None  # each process lowers for itself


def test_the_folder_of_a_killed_command_is_removed_by_the_next_one(temp: Path) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    abandoned = temp / f"{PREFIX}{int(gone.stdout)}-0123abcd"  # its maker has ended
    running = temp / f"{PREFIX}{os.getppid()}-4567cdef"  # its maker still runs: another command's
    for folder in (abandoned, running):
        folder.mkdir(mode=0o700)
        (folder / "lowered.pb").write_bytes(b"graph")
    others = temp / "tftrace-lowered-notes.txt"  # not a folder of this shape: not ours to remove
    others.write_text("kept")
    with shared_lowering():  # a command that lowers nothing does not list the temporary directory
        pass
    assert sorted(p.name for p in temp.iterdir()) == sorted([abandoned.name, running.name, others.name])
    with shared_lowering():  # one that lowers a graph makes its folder, and tidies then
        made = lowered_folder()
        assert made is not None
        assert sorted(p.name for p in temp.iterdir()) == sorted([made.name, running.name, others.name])
    assert sorted(p.name for p in temp.iterdir()) == sorted([running.name, others.name])


def test_without_a_temporary_directory_each_process_lowers_for_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    def none_usable() -> str:
        raise FileNotFoundError(2, "No usable temporary directory found")

    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.setattr(tempfile, "gettempdir", none_usable)
    with shared_lowering():
        assert CACHE_ENV not in os.environ and lowered_folder() is None

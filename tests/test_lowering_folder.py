"""The folder one command's processes share their lowered graphs through
(tracer.artifacts.lowering.shared_lowering): private, named to the children, gone at the end."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tracer.artifacts.lowering import CACHE_ENV, shared_lowering


def test_a_command_makes_a_private_folder_names_it_to_its_children_and_removes_it(monkeypatch) -> None:
    monkeypatch.delenv(CACHE_ENV, raising=False)
    with shared_lowering():
        folder = Path(os.environ[CACHE_ENV])
        assert folder.is_dir() and folder.name.startswith("tftrace-lowered-")
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700  # this user's processes only
        (folder / "lowered.pb").write_bytes(b"graph")
        with shared_lowering():  # tftrace run by tftrace (a child): the same folder, left to its maker
            assert os.environ[CACHE_ENV] == str(folder)
        assert folder.is_dir()
    assert CACHE_ENV not in os.environ and not folder.exists()


def test_the_folder_is_removed_when_the_command_fails(monkeypatch) -> None:
    monkeypatch.delenv(CACHE_ENV, raising=False)
    with pytest.raises(RuntimeError), shared_lowering():
        folder = Path(os.environ[CACHE_ENV])
        raise RuntimeError("the command failed")
    assert not folder.exists() and CACHE_ENV not in os.environ


def test_a_folder_named_by_the_caller_is_used_and_kept(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    with shared_lowering():
        assert os.environ[CACHE_ENV] == str(tmp_path)
    assert tmp_path.is_dir() and os.environ[CACHE_ENV] == str(tmp_path)


def test_without_a_writable_temporary_folder_each_process_lowers_for_itself(monkeypatch) -> None:
    import tempfile  # noqa: PLC0415

    def read_only(**_: object) -> str:
        raise PermissionError(13, "Permission denied", "/tmp")

    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.setattr(tempfile, "mkdtemp", read_only)
    with shared_lowering():
        assert CACHE_ENV not in os.environ

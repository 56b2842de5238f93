"""atomic_save: the data and the rename both reach the disk, in that order, and platforms that cannot open a
directory still get the file."""

from __future__ import annotations

import os

import pytest
import torch

from rl_suite.checkpoint import atomic_save


def identify(fd: int, directory) -> str:
    """``"dir"`` if ``fd`` is open on ``directory``, else ``"file"``."""
    same = os.path.samestat(os.fstat(fd), os.stat(directory))
    return "dir" if same else "file"


def test_atomic_save_syncs_the_file_before_the_rename_and_the_directory_after(tmp_path, monkeypatch):
    path = tmp_path / "checkpoints" / "step_1.pt"
    events = []
    fsync, replace = os.fsync, os.replace

    def recording_fsync(fd):
        events.append((f"fsync {identify(fd, path.parent)}", os.fstat(fd).st_ino))
        fsync(fd)

    def recording_replace(source, target):
        events.append(("replace", os.stat(source).st_ino))
        replace(source, target)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    monkeypatch.setattr(os, "replace", recording_replace)
    atomic_save({"weights": torch.arange(3)}, path)

    written = os.stat(path).st_ino
    assert [kind for kind, _ in events] == ["fsync file", "replace", "fsync dir"], events
    assert events[0][1] == events[1][1] == written  # the file synced is the one renamed into place
    assert events[2][1] == os.stat(path.parent).st_ino
    assert torch.equal(torch.load(path, weights_only=True)["weights"], torch.arange(3))
    assert os.listdir(path.parent) == ["step_1.pt"]  # no temporary file left


@pytest.mark.parametrize("failing", ["open", "fsync"])
def test_atomic_save_still_writes_where_a_directory_cannot_be_synced(tmp_path, monkeypatch, failing):
    """Windows cannot open a directory, and some file systems refuse to fsync one: the save goes on without it."""
    path = tmp_path / "step_2.pt"
    original, refused = getattr(os, failing), []

    def refuse_directories(target, *args):
        is_directory = os.path.isdir(target) if failing == "open" else identify(target, tmp_path) == "dir"
        if is_directory:
            refused.append(target)
            raise PermissionError(13, "Permission denied", str(tmp_path))
        return original(target, *args)

    monkeypatch.setattr(os, failing, refuse_directories)
    atomic_save({"step": torch.tensor(2)}, path)
    assert refused, "the directory was never synced"
    assert torch.load(path, weights_only=True)["step"].item() == 2

"""`CommitFiles`: a task's file of a pruned commit is its spare, which its
next write overwrites (a new file under /dev/shm costs its pages)."""

import os

import pytest

from keras_hybrid.contract.commit_files import CommitFiles
from keras_hybrid.contract.commit_files import folder_name


def _blob(data):
    return lambda f: f.write(data)


def _ino(path) -> int:
    return os.stat(path).st_ino


def test_a_pruned_file_is_overwritten_by_the_next_write(tmp_path):
    files = CommitFiles(str(tmp_path))
    for step in (10, 20):
        files.write(folder_name(step, 0), 0, _blob(b"step %d" % step))
    pruned = _ino(files.path(folder_name(10, 0), 0))
    files.prune(0, [folder_name(20, 0)])
    assert sorted(os.listdir(tmp_path)) == [".spare-task-0.npy", "commit-20-g0"]
    assert _ino(tmp_path / ".spare-task-0.npy") == pruned
    files.write(folder_name(30, 0), 0, _blob(b"step 30"))
    # The same file, renamed and overwritten; the kept commit is intact.
    assert _ino(files.path(folder_name(30, 0), 0)) == pruned
    assert files.read(folder_name(30, 0), 0) == b"step 30"
    assert files.read(folder_name(20, 0), 0) == b"step 20"
    assert sorted(os.listdir(tmp_path)) == ["commit-20-g0", "commit-30-g0"]


def test_a_longer_spare_is_cut_to_the_new_blob(tmp_path):
    files = CommitFiles(str(tmp_path))
    files.write(folder_name(10, 0), 3, _blob(b"x" * 100_000))
    files.prune(3, [])
    files.write(folder_name(20, 0), 3, _blob(b"short"))
    assert files.read(folder_name(20, 0), 3) == b"short"


def test_a_spare_serves_its_own_task_only(tmp_path):
    files = CommitFiles(str(tmp_path))
    files.write(folder_name(10, 0), 0, _blob(b"task 0"))
    files.prune(0, [])
    files.write(folder_name(20, 0), 1, _blob(b"task 1"))
    assert os.path.exists(tmp_path / ".spare-task-0.npy")
    assert files.read(folder_name(20, 0), 1) == b"task 1"
    # A second pruned file replaces the spare.
    files.write(folder_name(20, 0), 0, _blob(b"task 0 again"))
    files.write(folder_name(30, 0), 0, _blob(b"task 0, 30"))
    newer = _ino(files.path(folder_name(20, 0), 0))
    files.prune(0, [folder_name(30, 0)])
    assert _ino(tmp_path / ".spare-task-0.npy") == newer


def test_a_write_cut_short_leaves_no_file(tmp_path):
    files = CommitFiles(str(tmp_path))
    files.write(folder_name(10, 0), 0, _blob(b"rows"))
    files.prune(0, [])

    def fail(f):
        f.write(b"half a blob")
        raise MemoryError("no room")

    with pytest.raises(MemoryError, match="no room"):
        files.write(folder_name(20, 0), 0, fail)
    assert not files.exists(folder_name(20, 0), 0)
    assert os.listdir(tmp_path) == []  # neither the spare nor a temp

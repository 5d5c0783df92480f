"""`CommitFiles`: the files of commits of partitioned tables in one
directory.

Each member's rows of a commit are one blob (`.npy` records one after the
other, made by `contract.commit_blob`) at `<root>/commit-<step>-
g<generation>/task-<t>.npy`, written to a temporary name then renamed, so
a half-written file is never read. A task's file of a pruned commit is
kept as its spare (`.spare-task-<t>.npy`), renamed to the next temporary
name and overwritten: a new file under /dev/shm costs its pages (19 MB,
timed alone: 7 to 10 ms of CPU to write a new file against about 3.5 ms
to overwrite one, and 2.4 ms to remove it). A pruned commit's files are
never read again (a survivor reads the files of a lost task, which
prunes nothing more).

The workers use it on a directory they share (the directory store); the
launcher's `commit_server.CommitServer` uses it on a directory of its own
host and serves it to workers on other hosts (the served store).
`commit_server.CommitClient` has the same methods.

Imports nothing heavy: the launcher runs without TensorFlow.
"""

import contextlib
import os
import re
import tempfile
from collections.abc import Callable

_FOLDER = re.compile(r"commit-\d+-g\d+")


def folder_name(global_step: int, generation: int) -> str:
    """The folder of the commit of `global_step` by `generation`."""
    return f"commit-{int(global_step)}-g{int(generation)}"


def file_name(task: int) -> str:
    """The name of `task`'s file in a commit's folder."""
    return f"task-{int(task)}.npy"


class CommitFiles:
    """Commit files under `root`.

    Args:
        root: String. The job's commit directory.
    """

    def __init__(self, root: str) -> None:
        self.root = root

    def __repr__(self) -> str:
        return f"files under {self.root!r}"

    def path(self, folder: str, task: int) -> str:
        """The file of `task`'s rows in the commit `folder`.

        Raises:
            ValueError: If `folder` is not a commit's folder name.
        """
        if not _FOLDER.fullmatch(str(folder)):
            raise ValueError(
                "A commit folder is named `commit-<step>-g<generation>`. "
                f"Received: {folder!r}."
            )
        return os.path.join(self.root, folder, file_name(task))

    def write(self, folder: str, task: int, produce: Callable) -> None:
        """Writes `task`'s file of `folder`, atomically: `produce(f)`
        writes the blob to `f`, an unbuffered binary file (`io.FileIO`,
        whose `write` may write part of what it is given)."""
        temp = self.reserve(task)
        try:
            # Unbuffered: the commit server splices into its descriptor.
            with open(temp, "r+b", buffering=0) as f:
                produce(f)
                f.truncate()  # the spare may be longer
            self.publish(temp, folder, task)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.remove(temp)

    def reserve(self, task: int) -> str:
        """A temporary file for `task`'s next blob: its spare renamed
        (with the spare's content and size), else a new empty file.
        Beside the folders, not in one: a member ahead of this (slower)
        write may prune a folder while it is empty. Publish it with
        `publish`."""
        fd, temp = tempfile.mkstemp(prefix=".writing-", dir=self.root)
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.replace(self._spare(task), temp)
        return temp

    def publish(self, temp: str, folder: str, task: int) -> None:
        """Renames the complete blob `temp` (from `reserve`) to `task`'s
        file of `folder`."""
        final = self.path(folder, task)
        while True:
            os.makedirs(os.path.dirname(final), exist_ok=True)
            try:
                os.replace(temp, final)
                return
            except FileNotFoundError:
                if not os.path.exists(temp):
                    raise
                # `folder` was pruned since `makedirs`: make it again.

    def spare(self, task: int) -> str:
        """The path of `task`'s spare (which may not exist)."""
        return self._spare(task)

    def read(self, folder: str, task: int) -> bytes | None:
        """`task`'s blob of `folder`, or None if it is not there."""
        try:
            with open(self.path(folder, task), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def _spare(self, task: int) -> str:
        return os.path.join(self.root, f".spare-{file_name(task)}")

    def exists(self, folder: str, task: int) -> bool:
        return os.path.exists(self.path(folder, task))

    def prune(self, task: int, keep: list) -> None:
        """Removes `task`'s files of the commits whose folder is not in
        `keep` (the last one becomes its spare); a folder left empty goes
        too."""
        kept = set(keep)
        for name in os.listdir(self.root):
            if not _FOLDER.fullmatch(name) or name in kept:
                continue
            # Replaces (removes) the spare of a commit pruned before.
            with contextlib.suppress(FileNotFoundError):
                os.replace(self.path(name, task), self._spare(task))
            with contextlib.suppress(OSError):
                os.rmdir(os.path.join(self.root, name))  # the last one

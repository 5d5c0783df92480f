"""The directory store: a commit of partitioned tables in shared files.

When the workers share a filesystem (`keras-hybrid-run --commit-dir`, by
default a directory under /dev/shm on one host), each member writes its
own rows of every partitioned table and optimizer slot at each commit to
`DIR/commit-<global step>-g<generation>/task-<t>.npz`: a background
thread writes the numpy snapshot already taken, to a temporary name then
renamed, so a half-written file is never read. No collective runs at
commit time. The next commit waits for the previous write. Each member
removes its files of commits older than the last two it keeps.

After a lost worker, the next surviving member in task order reads the
lost one's rows from its file (`elastic_buddy.restored_rows`); a commit
whose file of a lost member is missing (it died while writing) cannot be
restored.

No private hook is touched here.
"""

import dataclasses
import os
import threading

import numpy as np

from keras_hybrid.sparse.row_partition import RowPartition

_PREFIX = "commit-"


@dataclasses.dataclass(frozen=True)
class TableCopy:
    """One table's (or slot's) part of a commit on one member.

    Attributes:
        path: String. The table's path (`ShardedTable.path`).
        partition: `RowPartition` at the commit; owners are ranks among
            the commit's members.
        own: NumPy array. This member's rows (local order).
        buddy: NumPy array. The rows of the member before it in ring
            order (that member's local order).
    """

    path: str
    partition: RowPartition
    own: np.ndarray
    buddy: np.ndarray


class DirectoryStore:
    """Writes this member's table rows of each commit to `root`.

    Args:
        root: String. The job's commit directory (shared by the workers).
        task: Int. This worker's task.
    """

    def __init__(self, root: str, task: int) -> None:
        self.root = root
        self.task = task
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def take(self, tables, members, global_step, generation, keep):
        """Snapshots `tables` (with their slots) and starts writing them.

        Args:
            tables: `ShardedTable`s and slots (`resharding.tables_of`).
            members: List of ints. The current member tasks, sorted.
            global_step: Int. The commit's global step.
            generation: Int. The members' generation.
            keep: List of strings. Folders of the other commits kept; this
                member's files in any other are removed.

        Returns:
            `{"members", "tables": [TableCopy], "bytes": 0, "folder"}`, or
            None without tables.
        """
        tables = list(tables)
        if not tables:
            return None
        self.wait()
        own = [np.array(t.stored_tensor()) for t in tables]
        folder = os.path.join(
            self.root, f"{_PREFIX}{int(global_step)}-g{int(generation)}"
        )
        self._thread = threading.Thread(
            target=self._write,
            args=(folder, own, [*keep, folder]),
            name="keras_hybrid_elastic_commit_writer",
            daemon=True,
        )
        self._thread.start()
        copies = [
            TableCopy(path=t.path, partition=t.partition, own=o, buddy=None)
            for t, o in zip(tables, own, strict=True)
        ]
        return {
            "members": list(members),
            "tables": copies,
            "bytes": 0,
            "folder": folder,
        }

    def wait(self) -> None:
        """Waits for the last write; raises its error if it failed."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise RuntimeError(
                f"keras-hybrid elastic: task {self.task} could not write "
                f"its commit of partitioned tables under {self.root!r}: "
                f"{error}. Give --commit-dir a writable directory with "
                "room for every worker's table rows (twice)."
            ) from error

    def _write(self, folder: str, arrays: list, keep: list) -> None:
        try:
            os.makedirs(folder, exist_ok=True)
            final = file_of(folder, self.task)
            temp = final + ".tmp.npz"
            np.savez(temp, *arrays)
            os.replace(temp, final)
            self._prune(keep)
        except OSError as error:  # reported by the next `wait`
            self._error = error

    def _prune(self, keep: list) -> None:
        """Removes this member's files of commits not in `keep`."""
        kept = {os.path.basename(f) for f in keep}
        for name in os.listdir(self.root):
            if not name.startswith(_PREFIX) or name in kept:
                continue
            folder = os.path.join(self.root, name)
            try:
                os.remove(file_of(folder, self.task))
            except FileNotFoundError:
                pass
            try:
                os.rmdir(folder)  # the last member to leave it
            except OSError:
                pass


def file_of(folder: str, task: int) -> str:
    """The file of `task`'s rows in the commit `folder`."""
    return os.path.join(folder, f"task-{int(task)}.npz")


def complete(copy: dict | None, survivors) -> bool:
    """Whether the commit `copy` of tables can be restored over
    `survivors`: the file of every lost member is there (always true for
    a buddy copy or without tables). The same on every survivor."""
    if copy is None or "folder" not in copy:
        return True
    lost = [t for t in copy["members"] if t not in survivors]
    return all(os.path.exists(file_of(copy["folder"], t)) for t in lost)


def read_rows(folder: str, task: int, check_only: bool = False):
    """`task`'s rows of each table of the commit `folder`, in order (None
    with `check_only`: only checks the file is there).

    Raises:
        NotImplementedError: If the file is missing (the task died before
            it was written).
    """
    path = file_of(folder, task)
    if not os.path.exists(path):
        raise NotImplementedError(
            f"keras-hybrid elastic: the rows of partitioned tables on task "
            f"{task} are lost: its commit file {path!r} is missing (the "
            "task died before writing it, or the directory is not shared). "
            "Restart from a checkpoint."
        )
    if check_only:
        return None
    with np.load(path) as data:
        return [data[f"arr_{i}"] for i in range(len(data.files))]

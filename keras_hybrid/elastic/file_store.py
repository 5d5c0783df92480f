"""The file stores: a commit of partitioned tables in files.

Each member writes its own rows of every partitioned table and optimizer
slot at each commit as one blob (`commit_blob`), `commit-<global step>-
g<generation>/task-<t>.npy`, to where the launcher says
(`ElasticMembership.commit_files`):

- the directory store: files in a directory every worker shares
  (`keras-hybrid-run --commit-dir`, by default one under /dev/shm on one
  host; `contract.commit_files.CommitFiles`);
- the served store: the launcher's commit server, which keeps the files
  on its own host (`contract.commit_server.CommitClient`, over TCP).

Both take the snapshot at the step boundary, on the training thread, as
one copy of each shard from the variable's own memory
(`stored_tensor_shared`, without the copy that a whole read of a table
makes in TensorFlow's copy-on-read mode: about 1 ms for 19 MB):

- the directory store copies it straight into the pages of the file
  (`contract.mapped_blobs`: the task's spare, mapped, reused from commit
  to commit); a background thread renames the file into the commit's
  folder and prunes. The views in the mapping are the member's own rows;
- the served store copies it into arrays of a commit the member gave up
  (new arrays cost page faults whenever the heap has given their memory
  back: the first commits of a worker took up to 30 ms; reused ones never
  do), which a background thread uploads from their memory
  (`commit_blob`, no copy). An array is handed out again only after the
  upload of its commit ended (the next commit waits for it) and once
  that commit left `keep`.

A blob never appears half-written. No collective runs at commit time.
The next commit waits for the previous write. Each member then removes
its files of commits older than the last two it keeps.

After a lost worker, the next surviving member in task order reads the
lost one's rows from its file (`buddy_store.restored_rows`); a commit
whose file of a lost member is missing (it died while writing) cannot be
restored.

No private hook is touched here.
"""

import dataclasses
import threading

import numpy as np

from keras_hybrid.contract import commit_blob
from keras_hybrid.contract.commit_files import CommitFiles
from keras_hybrid.contract.commit_files import folder_name
from keras_hybrid.contract.mapped_blobs import MappedBlobs
from keras_hybrid.sharding.row_partition import RowPartition


@dataclasses.dataclass(frozen=True)
class TableCopy:
    """One table's (or slot's) part of a commit on one member.

    Attributes:
        path: String. The table's path (`ShardedTable.path`), or a
            dynamic table's (`DynamicShard.path`).
        partition: `RowPartition` at the commit; owners are ranks among
            the commit's members. None for a dynamic table's keys.
        own: NumPy array. This member's rows (local order), or its
            dynamic table's keys and their state (`DynamicShard`).
        buddy: Dict of int to NumPy array, or None. The buddy store's
            copies: the rows of each member it keeps a copy of, by task
            (that member's local order); None for a file store.
    """

    path: str
    partition: RowPartition
    own: np.ndarray
    buddy: dict | None


class FileStore:
    """Writes this member's table rows of each commit to `files`.

    Args:
        files: Where the job's commit files are: a `CommitFiles`
            directory the workers share, or the launcher's
            `CommitClient`.
        task: Int. This worker's task.
    """

    def __init__(self, files, task: int) -> None:
        self.files = files
        self.task = task
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        # The arrays of the commits this member took, by folder (the
        # served store; the directory store writes into mapped files).
        self._snapshots: dict[str, list] = {}
        self._mapped = (
            MappedBlobs(files, task) if isinstance(files, CommitFiles) else None
        )

    def take(self, tables, members, global_step, generation, keep):
        """Snapshots `tables` (with their slots) and starts writing them.

        Args:
            tables: `ShardedTable`s and slots (`resharding.tables_of`).
            members: List of ints. The current member tasks, sorted.
            global_step: Int. The commit's global step.
            generation: Int. The members' generation.
            keep: List of strings. Folders of the other commits kept; this
                member's files in any other are removed, and their memory
                reused.

        Returns:
            `{"members", "tables": [TableCopy], "bytes": 0, "folder",
            "files"}`, or None without tables.
        """
        tables = list(tables)
        if not tables:
            return None
        self.wait()
        folder = folder_name(global_step, generation)
        shards = [t.stored_tensor_shared() for t in tables]
        if self._mapped is not None:
            try:
                temp, own = self._mapped.fill(shards)
            except OSError as error:
                raise self._failed(error) from error
            finish = (self._publish, (temp, folder, [*keep, folder]))
        else:
            spare = self._release(keep)
            own = [snapshot(shard, spare) for shard in shards]
            self._snapshots[folder] = own
            finish = (self._write, (folder, own, [*keep, folder]))
        del shards  # drop the reads before the variables are updated
        self._thread = threading.Thread(
            target=finish[0],
            args=finish[1],
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
            "files": self.files,
        }

    def wait(self) -> None:
        """Waits for the last write; raises its error if it failed."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise self._failed(error) from error

    def _failed(self, error: BaseException) -> RuntimeError:
        return RuntimeError(
            f"keras-hybrid elastic: task {self.task} could not write "
            f"its commit of partitioned tables to {self.files!r}: "
            f"{error}. The store needs room for every worker's table "
            "rows (twice): give --commit-dir a writable directory, or "
            "for --commit-store served keep the launcher running with "
            "room under /dev/shm on its host."
        )

    def _release(self, keep) -> list:
        """The arrays of this member's snapshots of commits not in `keep`
        (their writes ended: `take` waited), which it no longer holds."""
        kept, spare = set(keep), []
        for folder in [f for f in self._snapshots if f not in kept]:
            spare.extend(self._snapshots.pop(folder))
        return spare

    def _publish(self, temp: str, folder: str, keep: list) -> None:
        try:
            self._mapped.publish(temp, folder, keep)
        except OSError as error:  # reported by the next `wait`
            self._error = error

    def _write(self, folder: str, arrays: list, keep: list) -> None:
        try:
            self.files.write(
                folder, self.task, lambda f: commit_blob.write_blob(f, arrays)
            )
            self.files.prune(self.task, keep)
        except OSError as error:  # reported by the next `wait`
            self._error = error


def snapshot(tensor, spare: list) -> np.ndarray:
    """A copy of `tensor` in host memory: in an array of `spare` of its
    shape and dtype (taken out of `spare`), else in a new one."""
    value = np.asarray(tensor)  # a view of the variable's memory
    for i, array in enumerate(spare):
        if array.shape == value.shape and array.dtype == value.dtype:
            del spare[i]
            np.copyto(array, value)
            return array
    return np.array(value)


def complete(copy: dict | None, survivors) -> bool:
    """Whether the commit `copy` of tables can be restored over
    `survivors`: the file of every lost member is there (always true for
    a buddy copy or without tables). The same on every survivor."""
    if copy is None or "folder" not in copy:
        return True
    lost = [t for t in copy["members"] if t not in survivors]
    return all(copy["files"].exists(copy["folder"], t) for t in lost)


def read_rows(copy: dict, task: int, check_only: bool = False):
    """`task`'s rows of each table of the commit `copy` (of a file store),
    in order (None with `check_only`: only checks the file is there).

    Raises:
        NotImplementedError: If the file is missing (the task died before
            it was written).
        OSError: If the files cannot be read (e.g. the launcher's commit
            server is gone).
    """
    files, folder = copy["files"], copy["folder"]
    data = None
    if check_only:
        found = files.exists(folder, task)
    else:
        data = files.read(folder, task)
        found = data is not None
    if not found:
        raise NotImplementedError(
            f"keras-hybrid elastic: the rows of partitioned tables on task "
            f"{task} are lost: its commit file "
            f"{files.path(folder, task)!r} is missing (the task died before "
            "writing it, or the directory is not shared). Restart from a "
            "checkpoint."
        )
    if check_only:
        return None
    return commit_blob.read_blob(data)

"""`elastic_store`: each member's table rows of a commit in files.

The multi-process runs are in `test_lost_worker_multiprocess.py`; here
the files (a shared directory) and the restore from them, on the table of
`test_buddy_store`
(12 rows of 2 columns whose value is the row id, 12 one-row virtual
shards over the tasks [0, 1, 2]).
"""

import os
import tempfile
import time

import numpy as np

from keras_hybrid.contract import commit_blob
from keras_hybrid.contract.commit_files import CommitFiles
from keras_hybrid.contract.commit_server import CommitClient
from keras_hybrid.contract.commit_server import CommitServer
from keras_hybrid.contract.elastic_board import COMMIT_AUTHKEY_ENV
from keras_hybrid.elastic import buddy_store
from keras_hybrid.elastic import file_store
from keras_hybrid.sharding.row_partition import RowPartition
from keras_hybrid.testing import TestCase

MEMBERS = [0, 1, 2]
PARTITION = RowPartition.create(12, 3)
TABLE = np.repeat(np.arange(12, dtype="float32")[:, None], 2, axis=1)


class _Shard:
    """A stand-in for one task's `ShardedTable` (path, partition, rows)."""

    def __init__(self, task: int, scale: float = 1.0):
        self.path = "items/embeddings"
        self.partition = PARTITION
        self._rows = TABLE[PARTITION.ids_on_shard(task)] * scale

    def stored_tensor_shared(self):
        return self._rows


class _Changing:
    """A task's shard whose rows change: all equal to `value`."""

    def __init__(self, rows: int = 4):
        self.path = "items/embeddings"
        self.partition = PARTITION
        self.value = np.zeros((rows, 2), "float32")

    def stored_tensor_shared(self):
        return self.value


class _SlowPublish(CommitFiles):
    """`CommitFiles` whose publishing lasts 0.2 s, and which records the
    values of each blob at the start and at the end of it."""

    def __init__(self, root):
        super().__init__(root)
        self.seen = {}

    def publish(self, temp, folder, task):
        with open(temp, "rb") as f:
            first = f.read()
        time.sleep(0.2)
        with open(temp, "rb") as f:
            second = f.read()
        self.seen[folder] = {
            float(v) for blob in (first, second) for v in _values(blob)
        }
        super().publish(temp, folder, task)


def _values(blob: bytes):
    (rows,) = commit_blob.read_blob(blob)
    return np.unique(rows)


def _commit_all(root, step: int, scale: float = 1.0) -> dict:
    """Every task commits `step` to `root` (a directory, or files); returns
    task 0's commit."""
    files = CommitFiles(root) if isinstance(root, str) else root
    commits = {}
    for task in MEMBERS:
        store = file_store.FileStore(files, task)
        commits[task] = store.take([_Shard(task, scale)], MEMBERS, step, 0, [])
        store.wait()
    return commits[0]


def _file_of(root: str, commit: dict, task: int) -> str:
    return CommitFiles(root).path(commit["folder"], task)


class FileStoreTest(TestCase):
    def test_files_hold_each_tasks_rows(self):
        with tempfile.TemporaryDirectory() as root:
            commit = _commit_all(root, 10)
            self.assertEqual(
                sorted(os.listdir(os.path.join(root, commit["folder"]))),
                ["task-0.npy", "task-1.npy", "task-2.npy"],
            )
            (rows,) = file_store.read_rows(commit, 1)
        np.testing.assert_array_equal(rows, TABLE[PARTITION.ids_on_shard(1)])
        self.assertEqual(commit["bytes"], 0)

    def test_a_member_keeps_the_files_of_its_last_two_commits(self):
        with tempfile.TemporaryDirectory() as root:
            store = file_store.FileStore(CommitFiles(root), 1)
            kept = []
            for step in (10, 20, 30):
                commit = store.take([_Shard(1)], MEMBERS, step, 0, kept[-1:])
                kept.append(commit["folder"])
            store.wait()
            # The file of commit 10 is the spare the next write overwrites.
            self.assertEqual(
                sorted(os.listdir(root)),
                [".spare-task-1.npy", "commit-20-g0", "commit-30-g0"],
            )

    def test_a_commit_reuses_the_mapped_file_of_one_given_up(self):
        shard = _Changing()
        with tempfile.TemporaryDirectory() as root:
            store = file_store.FileStore(CommitFiles(root), 1)
            commits, kept = {}, []
            for step in (10, 20, 30, 40, 50):
                shard.value[:] = step
                commit = store.take([shard], MEMBERS, step, 0, kept[-1:])
                commits[step] = commit
                kept.append(commit["folder"])
            store.wait()
            (rows_40,) = file_store.read_rows(commits[40], 1)
            (rows_50,) = file_store.read_rows(commits[50], 1)
        own = {s: c["tables"][0].own for s, c in commits.items()}
        # The commits kept (40 and 50) hold their own rows, in memory and
        # in their files: 40 in the file (and mapping) 10 had, 50 in 20's.
        self.assertTrue(np.shares_memory(own[40], own[10]))
        self.assertTrue(np.shares_memory(own[50], own[20]))
        self.assertFalse(np.shares_memory(own[40], own[50]))
        np.testing.assert_array_equal(own[40], np.full((4, 2), 40.0))
        np.testing.assert_array_equal(own[50], np.full((4, 2), 50.0))
        np.testing.assert_array_equal(rows_40, own[40])
        np.testing.assert_array_equal(rows_50, own[50])

    def test_a_file_is_not_reused_while_its_publish_lasts(self):
        # Each commit leaves `keep` at once; 10's file is the spare 30
        # writes into, once 20's (slow) publish has ended.
        shard = _Changing()
        with tempfile.TemporaryDirectory() as root:
            files = _SlowPublish(root)
            store = file_store.FileStore(files, 1)
            commits = {}
            for step in (10, 20, 30):
                shard.value[:] = step
                commits[step] = store.take([shard], MEMBERS, step, 0, [])
            store.wait()
            (rows,) = file_store.read_rows(commits[30], 1)
        own = {s: c["tables"][0].own for s, c in commits.items()}
        self.assertTrue(np.shares_memory(own[30], own[10]))
        self.assertEqual(
            files.seen,
            {f"commit-{s}-g0": {float(s)} for s in (10, 20, 30)},
        )
        np.testing.assert_array_equal(rows, np.full((4, 2), 30.0))

    def test_the_served_store_reuses_the_arrays_of_a_commit_given_up(self):
        shard = _Changing()
        with tempfile.TemporaryDirectory() as root:
            server = CommitServer(root, "127.0.0.1")
            try:
                key = bytes.fromhex(server.env()[COMMIT_AUTHKEY_ENV])
                store = file_store.FileStore(
                    CommitClient(server.address, key), 1
                )
                commits, kept = {}, []
                for step in (10, 20, 30):
                    shard.value[:] = step
                    commit = store.take([shard], MEMBERS, step, 0, kept[-1:])
                    commits[step] = commit
                    kept.append(commit["folder"])
                store.wait()
                (rows_30,) = file_store.read_rows(commits[30], 1)
            finally:
                server.close()
        own = {s: c["tables"][0].own for s, c in commits.items()}
        self.assertIs(own[30], own[10])
        np.testing.assert_array_equal(rows_30, np.full((4, 2), 30.0))

    def test_a_shard_of_another_shape_gets_a_new_array(self):
        with tempfile.TemporaryDirectory() as root:
            store = file_store.FileStore(CommitFiles(root), 1)
            first = store.take([_Changing(4)], MEMBERS, 10, 0, [])
            second = store.take([_Changing(6)], MEMBERS, 20, 0, [])
            store.wait()
        self.assertIsNot(second["tables"][0].own, first["tables"][0].own)
        self.assertEqual(second["tables"][0].own.shape, (6, 2))

    def test_neighbours_lost_together_come_back_from_the_files(self):
        with tempfile.TemporaryDirectory() as root:
            commit = _commit_all(root, 10)
            buddy_store.check_survivable(commit, [0])
            (lost,) = buddy_store._lost_rows(commit, [0], 0)
        partition, rows = buddy_store.restored_rows(
            commit["tables"][0], MEMBERS, [0], 0, lost
        )
        self.assertEqual(partition.virtual.owners, (0,) * 12)
        # Every row is the row its id says, in local order.
        ids = partition.ids_on_shard(0).astype("float32")
        np.testing.assert_array_equal(rows[:, 0], ids)
        self.assertEqual(sorted(ids), list(range(12)))

    def test_a_missing_file_is_not_survivable_on_any_survivor(self):
        with tempfile.TemporaryDirectory() as root:
            commit = _commit_all(root, 10)
            os.remove(_file_of(root, commit, 2))
            with self.assertRaisesRegex(
                NotImplementedError, r"on task 2 are lost: its commit file"
            ):
                buddy_store.check_survivable(commit, [0, 1])

    def test_a_failed_write_is_reported_by_the_commit(self):
        # The directory store writes the file at the commit (its mapping);
        # the served store's upload fails at the next (`ServedStoreTest`).
        with tempfile.TemporaryDirectory() as root:
            files = CommitFiles(os.path.join(root, "file"))
            store = file_store.FileStore(files, 0)
            with open(os.path.join(root, "file"), "w"):
                pass
            with self.assertRaisesRegex(RuntimeError, "could not write"):
                store.take([_Shard(0)], MEMBERS, 10, 0, [])


class CompleteTest(TestCase):
    def test_a_commit_is_complete_when_every_lost_file_is_there(self):
        with tempfile.TemporaryDirectory() as root:
            commit = _commit_all(root, 10)
            self.assertTrue(file_store.complete(commit, [0, 1]))
            os.remove(_file_of(root, commit, 2))
            self.assertFalse(file_store.complete(commit, [0, 1]))
            # Task 2 survives: its file is not needed.
            self.assertTrue(file_store.complete(commit, [0, 2]))
        self.assertTrue(file_store.complete(None, [0]))


class ServedStoreTest(TestCase):
    """The same files through the launcher's `CommitServer` (the served
    store): a lost task's rows come back from the server."""

    def test_lost_rows_come_back_from_the_server(self):
        with tempfile.TemporaryDirectory() as root:
            server = CommitServer(root, "127.0.0.1")
            try:
                key = bytes.fromhex(server.env()[COMMIT_AUTHKEY_ENV])
                client = CommitClient(server.address, key)
                commit = _commit_all(client, 10)
                self.assertIs(commit["files"], client)
                self.assertTrue(file_store.complete(commit, [0, 2]))
                buddy_store.check_survivable(commit, [0, 2])
                (lost,) = buddy_store._lost_rows(commit, [0, 2], 2)
                np.testing.assert_array_equal(
                    lost[1], TABLE[PARTITION.ids_on_shard(1)]
                )
                os.remove(_file_of(root, commit, 1))
                self.assertFalse(file_store.complete(commit, [0, 2]))
                with self.assertRaisesRegex(
                    NotImplementedError, "on task 1 are lost"
                ):
                    buddy_store.check_survivable(commit, [0, 2])
            finally:
                server.close()
            # A failed upload is reported by the next commit.
            store = file_store.FileStore(client, 0)
            store.take([_Shard(0)], MEMBERS, 20, 0, [])
            with self.assertRaisesRegex(
                RuntimeError, "could not write .* commit server at"
            ):
                store.wait()

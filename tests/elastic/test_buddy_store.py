"""`elastic_buddy`: which rows a survivor restores from a commit.

The multi-process runs are in `test_lost_worker_multiprocess.py`; here the
pure part, checked by hand on a small table: 12 rows of 2 columns, whose
value is the row id, in 12 one-row virtual shards over the tasks [0, 1, 2].
"""

import numpy as np

from keras_hybrid.elastic import buddy_store
from keras_hybrid.sharding.row_partition import RowPartition
from keras_hybrid.testing import TestCase

MEMBERS = [0, 1, 2]


def _commit(task: int):
    """Task `task`'s copy of the commit of `_table()` over `MEMBERS`."""
    partition = RowPartition.create(12, 3)
    table = np.repeat(np.arange(12, dtype="float32")[:, None], 2, axis=1)
    prev = (task - 1) % 3

    def rows(shard):
        return table[partition.ids_on_shard(shard)]

    copy = buddy_store.TableCopy(
        path="items/embeddings",
        partition=partition,
        own=rows(task),
        buddy={prev: rows(prev)},
    )
    return {"members": MEMBERS, "tables": [copy], "bytes": 0}


class RestoredRowsTest(TestCase):
    def _restore(self, task, survivors):
        copy = _commit(task)
        partition, rows = buddy_store.restored_rows(
            copy["tables"][0], MEMBERS, survivors, task
        )
        # Every restored row is the row its id says, in local order.
        rank = sorted(survivors).index(task)
        ids = partition.ids_on_shard(rank)
        np.testing.assert_array_equal(rows[:, 0], ids.astype("float32"))
        return partition, rank

    def test_last_task_lost_its_shards_go_to_task_0(self):
        part, _ = self._restore(0, [0, 1])
        # Virtual shard v was on task v % 3: task 2's (2, 5, 8, 11) go to 0.
        self.assertEqual(part.virtual.owners, (0, 1, 0) * 4)
        self._restore(1, [0, 1])

    def test_middle_task_lost_its_shards_go_to_the_next(self):
        part, rank = self._restore(2, [0, 2])
        self.assertEqual(rank, 1)
        # Task 1's shards go to task 2, rank 1 of the survivors.
        self.assertEqual(part.virtual.owners, (0, 1, 1) * 4)
        self._restore(0, [0, 2])

    def test_neighbours_lost_together_are_not_survivable(self):
        copy = _commit(0)
        buddy_store.check_survivable(copy, [0, 2])
        with self.assertRaisesRegex(
            NotImplementedError,
            r"tasks \[1\] are lost: their buddy copies were on tasks \[2\]",
        ):
            buddy_store.check_survivable(copy, [0])

    def test_no_tables_is_always_survivable(self):
        buddy_store.check_survivable(None, [0])

"""Two buddy copies: which rows a survivor restores when two members are
lost at once (the pure part of `elastic.buddy_store`; the runs are in
`test_lose_any_worker_multiprocess.py`). A table of 16 rows of 2 columns,
whose value is the row id, in 16 one-row virtual shards over the tasks
[0, 1, 2, 3]; each member holds the rows of the two before it."""

import numpy as np

from keras_hybrid.elastic import buddy_store
from keras_hybrid.elastic import commit_layout
from keras_hybrid.sharding.row_partition import RowPartition
from keras_hybrid.testing import TestCase

MEMBERS = [0, 1, 2, 3]
PARTITION = RowPartition.create(16, 4)
TABLE = np.repeat(np.arange(16, dtype="float32")[:, None], 2, axis=1)


def _rows(task):
    return TABLE[PARTITION.ids_on_shard(task)]


def _commit(task: int, copies: int = 2):
    """Task `task`'s copy of the commit, with `copies` buddy copies."""
    before = [(task - k) % 4 for k in range(1, copies + 1)]
    copy = buddy_store.TableCopy(
        path="items/embeddings",
        partition=PARTITION,
        own=_rows(task),
        buddy={t: _rows(t) for t in before},
    )
    return {"members": MEMBERS, "tables": [copy], "bytes": 0, "copies": copies}


class TwoCopiesTest(TestCase):
    def _restore(self, survivors, copies=2):
        seen = []
        for task in survivors:
            commit = _commit(task, copies)
            buddy_store.check_survivable(commit, survivors)
            partition, rows = buddy_store.restored_rows(
                commit["tables"][0], MEMBERS, survivors, task, copies=copies
            )
            ids = partition.ids_on_shard(sorted(survivors).index(task))
            # Every restored row is the row its id says, in local order.
            np.testing.assert_array_equal(rows[:, 0], ids.astype("float32"))
            seen.extend(ids.tolist())
        self.assertEqual(sorted(seen), list(range(16)))
        return partition

    def test_two_neighbours_lost_come_back_from_the_second_copy(self):
        partition = self._restore([0, 3])
        # Tasks 1 and 2 lost: task 1's copies were on 2 (lost) and 3,
        # task 2's on 3: task 3 (rank 1) takes both.
        self.assertEqual(partition.virtual.owners, (0, 1, 1, 1) * 4)

    def test_the_first_task_and_the_last_lost_together(self):
        partition = self._restore([1, 2])
        # Task 3's copies were on 0 (lost) and 1; task 0's on 1.
        self.assertEqual(partition.virtual.owners, (0, 0, 1, 0) * 4)

    def test_any_two_of_four_lost_are_survivable(self):
        for lost in [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]:
            survivors = [t for t in MEMBERS if t not in lost]
            with self.subTest(lost=lost):
                self._restore(survivors)

    def test_three_in_a_row_are_not(self):
        with self.assertRaisesRegex(
            NotImplementedError,
            r"tasks \[0\] are lost: their buddy copies were on tasks "
            r"\[1, 2\].*with 2 buddy copies survives any 2 lost at once",
        ):
            buddy_store.check_survivable(_commit(3), [3])

    def test_one_copy_does_not_survive_two_neighbours(self):
        with self.assertRaisesRegex(
            NotImplementedError,
            r"tasks \[1\] are lost.*on tasks \[2\].*--buddy-copies",
        ):
            buddy_store.check_survivable(_commit(0, copies=1), [0, 3])

    def test_the_layout_carries_the_count_of_copies(self):
        layout = commit_layout.layout_of(_commit(0))
        joiner = commit_layout.copy_from_layout(layout)
        self.assertEqual(joiner["copies"], 2)
        # A joiner that lacks the commit restores no rows, and decides the
        # same holders as the members.
        partition, rows = buddy_store.restored_rows(
            joiner["tables"][0], MEMBERS, [0, 3, 4], 4, copies=2
        )
        self.assertEqual(rows.shape, (0, 2))
        self.assertEqual(partition.virtual.owners, (0, 1, 1, 1) * 4)

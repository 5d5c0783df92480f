"""`elastic_layout`: a joiner admitted after a commit restores from its
layout alone (the broadcast itself runs in
`test_resize_multiprocess.py`'s `ElasticLossNearGrowTest`).

The commit of a 12-row table over tasks [0, 1, 2] (12 one-row virtual
shards, rows valued by their id); task 3 joined after it; task 1 is lost.
"""

import json

import numpy as np

from keras_hybrid.elastic import buddy_store
from keras_hybrid.elastic import commit_layout
from keras_hybrid.elastic.file_store import TableCopy
from keras_hybrid.sharding.row_partition import RowPartition
from keras_hybrid.testing import TestCase

MEMBERS = [0, 1, 2]


def _commit(task: int) -> dict:
    partition = RowPartition.create(12, 3)
    ids = partition.ids_on_shard(MEMBERS.index(task))
    rows = np.repeat(ids.astype("float32")[:, None], 2, axis=1)
    copy = TableCopy("items/embeddings", partition, rows, buddy=None)
    return {"members": MEMBERS, "tables": [copy], "bytes": 0, "folder": "/d"}


class LayoutTest(TestCase):
    def test_layout_round_trips_through_json_without_rows(self):
        layout = json.loads(json.dumps(commit_layout.layout_of(_commit(0))))
        copy = commit_layout.copy_from_layout(layout)
        self.assertEqual(copy["members"], MEMBERS)
        self.assertEqual(copy["folder"], "/d")
        (table,) = copy["tables"]
        self.assertEqual(table.path, "items/embeddings")
        self.assertEqual(table.partition, _commit(0)["tables"][0].partition)
        self.assertEqual(table.own.shape, (0, 2))
        self.assertEqual(table.own.dtype, np.float32)

    def test_a_joiner_restores_no_rows_and_the_lost_go_to_members(self):
        survivors = [0, 2, 3]
        joiner = commit_layout.copy_from_layout(
            commit_layout.layout_of(_commit(0))
        )
        lost = {1: _commit(1)["tables"][0].own}  # task 1's file, read by 2
        restored = {}
        for task, copy, lost_rows in (
            (0, _commit(0), {}),
            (2, _commit(2), lost),
            (3, joiner, {}),
        ):
            restored[task] = buddy_store.restored_rows(
                copy["tables"][0], MEMBERS, survivors, task, lost_rows
            )
        partition, rows = restored[3]
        self.assertEqual(rows.shape, (0, 2))
        self.assertEqual(partition.rows_on_shard(2), 0)
        # Every id is restored once, on the survivor the partition names.
        seen = []
        for task, (partition, rows) in restored.items():
            rank = survivors.index(task)
            ids = partition.ids_on_shard(rank)
            np.testing.assert_array_equal(rows[:, 0], ids.astype("float32"))
            seen.extend(ids.tolist())
        self.assertEqual(sorted(seen), list(range(12)))

"""Resizes named by task lists (`resharding.reshard_members`): which
virtual shards move when any task joins or leaves, not only the highest,
and the errors raised before any collective."""

import numpy as np
import tensorflow as tf

from keras_hybrid.comm import make_communicator
from keras_hybrid.sharding.row_partition import RowPartition
from keras_hybrid.sharding.shard_assignment import ShardAssignment
from keras_hybrid.sparse import resharding
from keras_hybrid.sparse.sharded_table import ShardedTable
from keras_hybrid.testing import TestCase

ROWS = 4096  # 1024 virtual shards of 4 rows


class MemberTargetTest(TestCase):
    def test_highest_task_leaving_is_a_plain_resize(self):
        part = RowPartition.create(ROWS, 4)
        new = resharding.member_target(part, [0, 1, 2, 3], [0, 1, 2])
        self.assertEqual(new, part.resized(3))

    def test_middle_task_leaving_moves_only_its_shards(self):
        part = RowPartition.create(ROWS, 4)
        new = resharding.member_target(part, [0, 1, 2, 3], [0, 2, 3])
        # Ranks of the old group: task 1 (rank 1) holds nothing afterwards.
        self.assertEqual(new.virtual.counts().tolist(), [342, 0, 341, 341])
        moves = part.virtual.moved_to(new.virtual)
        self.assertEqual(len(moves), 256)  # task 1's shards, no more
        self.assertEqual({src for src, _ in moves.values()}, {1})

    def test_joiner_between_members_receives_its_quota(self):
        # Tasks 0 and 2 hold the table (ranks 0 and 2 of the new group);
        # task 1 joins.
        two = RowPartition.create(ROWS, 2)
        owners = tuple(2 * o for o in two.virtual.owners)
        part = two.with_assignment(ShardAssignment(owners, 3))
        new = resharding.member_target(part, [0, 1, 2], [0, 1, 2])
        self.assertEqual(sorted(new.virtual.counts().tolist()), [341, 341, 342])
        moves = part.virtual.moved_to(new.virtual)
        self.assertEqual({dst for _, dst in moves.values()}, {1})
        self.assertEqual(len(moves), new.virtual.counts()[1])


class ReshardMembersErrorsTest(TestCase):
    def setUp(self):
        super().setUp()
        self.comm = make_communicator("tf", 0, 1, 10.0, 1024)

    def test_join_and_leave_at_once_is_refused(self):
        with self.assertRaisesRegex(ValueError, "either adds or removes"):
            resharding.reshard_members([], self.comm, [0, 1], [0, 2])

    def test_communicator_must_span_the_larger_group(self):
        with self.assertRaisesRegex(ValueError, "must span the 2 workers"):
            resharding.reshard_members([], self.comm, [0], [0, 1])


class RebindMembersTest(TestCase):
    def setUp(self):
        super().setUp()
        self.comm = make_communicator("tf", 0, 1, 10.0, 1024)

    def _table(self, part):
        rows = part.rows_on_shard(0)
        return ShardedTable(
            path="t/embeddings",
            full_shape=(part.num_rows, 2),
            partition=part,
            communicator=self.comm,
            role="table",
            initial_value=np.zeros((rows, 2), "float32"),
            shape=tf.TensorShape([None, 2]),
        )

    def test_renumbers_owners_by_task(self):
        # Task 3 owned nothing: tasks [0, 3] -> [0] keeps task 0's rows.
        part = RowPartition.create(ROWS, 1).with_assignment(
            ShardAssignment((0,) * 1024, 2)
        )
        table = self._table(part)
        resharding.rebind_members([table], self.comm, [0, 3], [0])
        self.assertEqual(table.partition.num_shards, 1)
        self.assertEqual(table.local_rows, ROWS)

    def test_rows_on_a_task_that_left_are_refused(self):
        table = self._table(RowPartition.create(ROWS, 2))
        with self.assertRaisesRegex(ValueError, "not among the new members"):
            resharding.rebind_members([table], self.comm, [0, 1], [0])

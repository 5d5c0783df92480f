"""Row -> shard mapping: a bijection, independent of shard count, and
balanced on skewed ids."""

import numpy as np
import tensorflow as tf

from keras_hybrid.sharding.row_partition import RowPartition
from keras_hybrid.sharding.shard_assignment import ShardAssignment
from keras_hybrid.testing import TestCase


class RowPartitionTest(TestCase):
    def test_every_row_has_exactly_one_home(self):
        for num_rows, num_shards in [(10, 3), (97, 4), (1000, 8), (5, 5)]:
            part = RowPartition.create(num_rows, num_shards)
            ids = np.arange(num_rows)
            homes = set(
                zip(part.shard_of(ids), part.local_index(ids), strict=True)
            )
            self.assertEqual(len(homes), num_rows)
            for shard in range(num_shards):
                on_shard = part.ids_on_shard(shard)
                self.assertEqual(len(on_shard), part.rows_on_shard(shard))
                np.testing.assert_array_equal(part.shard_of(on_shard), shard)
                np.testing.assert_array_equal(
                    part.local_index(on_shard), np.arange(len(on_shard))
                )

    def test_row_identity_does_not_depend_on_shard_count(self):
        # Concatenating all shards' ids in shard order, then sorting,
        # gives every id once, whatever the number of shards.
        for num_shards in (1, 2, 4):
            part = RowPartition.create(1000, num_shards)
            ids = np.concatenate(
                [part.ids_on_shard(s) for s in range(num_shards)]
            )
            np.testing.assert_array_equal(np.sort(ids), np.arange(1000))

    def test_zipf_ids_are_balanced_over_four_shards(self):
        # The figure: Zipf(1.1) ids over 100 000 rows, 4 shards,
        # max/mean rows served per shard <= 1.15. "Served" counts each
        # batch's unique ids (what a shard sends after local dedupe).
        rng = np.random.default_rng(0)
        part = RowPartition.create(100_000, 4)
        served = np.zeros(4)
        for _ in range(100):
            ids = rng.zipf(1.1, size=64 * 32) - 1
            ids = np.unique(ids[ids < 100_000])
            served += np.bincount(part.shard_of(ids), minlength=4)
        ratio = served.max() / served.mean()
        self.assertLessEqual(ratio, 1.15)
        # Contiguous ranges, for contrast, put the hot ids on shard 0.
        ranges = np.zeros(4)
        rng = np.random.default_rng(0)
        for _ in range(100):
            ids = rng.zipf(1.1, size=64 * 32) - 1
            ids = np.unique(ids[ids < 100_000])
            ranges += np.bincount(ids // 25_000, minlength=4)
        self.assertGreater(ranges.max() / ranges.mean(), 2.0)

    def test_tensor_and_numpy_agree(self):
        part = RowPartition.create(12345, 3)
        ids = np.arange(0, 12345, 7)
        np.testing.assert_array_equal(
            part.shard_of_tensor(tf.constant(ids)).numpy(),
            part.shard_of(ids),
        )

    def test_config_round_trip(self):
        part = RowPartition.create(500, 4)
        self.assertEqual(RowPartition.from_config(part.get_config()), part)

    def test_bad_arguments(self):
        with self.assertRaisesRegex(ValueError, r"`num_rows` must be >= 1"):
            RowPartition.create(0, 1)
        with self.assertRaisesRegex(ValueError, r"`num_shards` must be <="):
            RowPartition.create(2, 4)
        with self.assertRaisesRegex(TypeError, r"`num_shards` must be an int"):
            RowPartition.create(10, 2.0)


class VirtualShardTest(TestCase):
    def test_a_row_keeps_its_virtual_shard_and_finds_its_new_home(self):
        part = RowPartition.create(5000, 3)
        self.assertEqual(part.num_virtual, 1024)
        ids = np.arange(5000)
        for n in (4, 2, 7):
            moved = part.resized(n)
            np.testing.assert_array_equal(
                moved.virtual_shard_of(ids), part.virtual_shard_of(ids)
            )
            for shard in range(n):
                on_shard = moved.ids_on_shard(shard)
                self.assertEqual(len(on_shard), moved.rows_on_shard(shard))
                np.testing.assert_array_equal(moved.shard_of(on_shard), shard)
                np.testing.assert_array_equal(
                    moved.local_index(on_shard), np.arange(len(on_shard))
                )
            self.assertEqual(
                sum(moved.rows_on_shard(s) for s in range(n)), 5000
            )
            self.assertEqual(moved.rows_on_shard(n), 0)  # beyond: none

    def test_tensor_local_index_agrees_after_a_resize(self):
        part = RowPartition.create(12345, 3).resized(4)
        ids = np.arange(0, 12345, 7)
        tensor = tf.constant(ids, tf.int64)
        np.testing.assert_array_equal(
            part.local_index(tensor).numpy(), part.local_index(ids)
        )
        np.testing.assert_array_equal(
            part.shard_of_tensor(tensor).numpy(), part.shard_of(ids)
        )

    def test_a_partition_saved_before_virtual_shards_keeps_its_layout(self):
        # The config checkpoints wrote before virtual shards existed.
        old = {"num_rows": 1000, "num_shards": 4, "multiplier": 619,
               "offset": 333}  # fmt: skip
        part = RowPartition.from_config(old)
        ids = np.arange(1000)
        permuted = (ids * 619 + 333) % 1000
        np.testing.assert_array_equal(part.shard_of(ids), permuted % 4)
        np.testing.assert_array_equal(part.local_index(ids), permuted // 4)
        self.assertEqual(part.get_config(), old)
        self.assertEqual(part.num_virtual, 4)

    def test_resized_config_round_trip(self):
        part = RowPartition.create(3000, 4).resized(3)
        again = RowPartition.from_config(part.get_config())
        self.assertEqual(again, part)
        self.assertEqual(again.rows_on_shard(0), part.rows_on_shard(0))

    def test_assignment_must_fit(self):
        part = RowPartition.create(300, 2)
        with self.assertRaisesRegex(ValueError, "300 virtual shards"):
            part.with_assignment(ShardAssignment.balanced(64, 2))

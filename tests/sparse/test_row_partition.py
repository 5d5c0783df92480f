"""Row -> shard mapping: a bijection, independent of shard count, and
balanced on skewed ids."""

import numpy as np
import tensorflow as tf

from keras_hybrid.sparse.row_partition import RowPartition
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

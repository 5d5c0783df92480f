"""An elastic job refuses, before training, a global batch with fewer
rows than it can have workers; any other batch is exact."""

import numpy as np
import tensorflow as tf

from keras_hybrid.patches.elastic_training import check_global_batch
from keras_hybrid.strategy.input_sharding import slice_rows
from keras_hybrid.testing import TestCase


class GlobalBatchTest(TestCase):
    def test_batch_divisible_by_every_count_passes(self):
        check_global_batch(np.zeros((120, 3)), 12, 2, 4)

    def test_batch_not_split_over_three_workers_passes(self):
        check_global_batch(np.zeros((160, 3)), 16, 2, 4)

    def test_batch_smaller_than_max_np_is_refused(self):
        with self.assertRaisesRegex(
            ValueError,
            r"global batch of 3 rows\. Use a batch size of at least 4",
        ):
            check_global_batch(np.zeros((30, 3)), 3, 2, 4)

    def test_last_partial_batch_is_checked(self):
        with self.assertRaisesRegex(ValueError, "global batch of 2 rows"):
            check_global_batch(np.zeros((26, 3)), 12, 2, 4)

    def test_validation_split_rows_are_not_training_batches(self):
        # 128 rows, validation_split 0.25: 96 train (8 batches of 12),
        # 32 validate (not training batches).
        check_global_batch(np.zeros((128, 3)), 12, 2, 4, 0.25)
        with self.assertRaisesRegex(ValueError, "global batch of 3 rows"):
            check_global_batch(np.zeros((132, 3)), 12, 2, 4, 0.25)  # 99

    def test_dataset_batch_is_read_from_its_first_element(self):
        data = tf.data.Dataset.from_tensor_slices(np.zeros((20, 3))).batch(2)
        with self.assertRaisesRegex(ValueError, "global batch of 2 rows"):
            check_global_batch(data, None, 2, 3)

    def test_slices_follow_rank_and_size_tensors(self):
        batch = (tf.reshape(tf.range(12), [12, 1]), tf.range(12))
        parts = [
            slice_rows(
                batch, tf.constant(r, tf.int64), tf.constant(3, tf.int64)
            )
            for r in range(3)
        ]
        self.assertEqual(
            [p[1].numpy().tolist() for p in parts],
            [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]],
        )

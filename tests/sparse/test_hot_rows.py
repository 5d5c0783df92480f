"""`HotRows` in one process: the split of ids, the merge of rows and the
choice of the hot set from counts (the 2-worker training test is
`test_hot_rows_multiprocess.py`)."""

import types

import numpy as np
import tensorflow as tf

import keras_hybrid as kh
from keras_hybrid.callbacks import HotRowsRefresh
from keras_hybrid.sharding.row_partition import RowPartition
from keras_hybrid.sparse import hot_rows
from keras_hybrid.sparse.hot_rows import HotRows
from keras_hybrid.testing import TestCase


class _OneComm:
    """A one-worker communicator: collectives return their input."""

    rank, size = 0, 1

    def all_reduce(self, tensors, op="sum", path="dense"):
        del op, path
        return [tf.convert_to_tensor(t) for t in tensors]

    def all_gather(self, tensor, path="control", key=None):
        del path
        tensor = tf.convert_to_tensor(tensor)
        return tensor, tf.shape(tensor)[:1]


def _table(rows=100):
    partition = RowPartition.create(rows, 1)
    return types.SimpleNamespace(
        path="t",
        full_shape=(rows, 4),
        local_rows=rows,
        partition=partition,
        communicator=_OneComm(),
    )


class SplitTest(TestCase):
    def test_split_finds_hot_ids_and_their_slots(self):
        hot = HotRows(_table(), 4)
        hot.ids.assign([3, 7, 42, 90])
        is_hot, slot = hot.split(tf.constant([7, 8, 90, 0, 3, 99], tf.int64))
        np.testing.assert_array_equal(
            is_hot.numpy(), [True, False, True, False, True, False]
        )
        np.testing.assert_array_equal(slot.numpy(), [1, 0, 3, 0, 0, 0])

    def test_hot_set_is_at_most_the_table(self):
        self.assertEqual(HotRows(_table(rows=5), 64).num_rows, 5)

    def test_merge_puts_rows_back_in_unique_order(self):
        is_hot = tf.constant([False, True, True, False])
        cold = tf.constant([[0.0], [3.0]])
        hot = tf.constant([[1.0], [2.0]])
        merged = hot_rows.merge(is_hot, cold, hot)
        np.testing.assert_array_equal(merged.numpy(), [[0], [1], [2], [3]])

    def test_non_positive_size_is_an_error(self):
        with self.assertRaisesRegex(ValueError, "must be positive"):
            HotRows(_table(), 0)


class ChooseTest(TestCase):
    def test_pick_takes_highest_counts_ties_to_smaller_id(self):
        ids = np.array([5, 9, 2, -1, 7, 3])
        counts = np.array([4.0, 9.0, 4.0, -1.0, 1.0, 4.0])
        np.testing.assert_array_equal(hot_rows.pick(ids, counts, 3), [2, 3, 9])

    def test_pick_with_too_few_candidates_is_an_error(self):
        with self.assertRaisesRegex(ValueError, "at least 3 candidates"):
            hot_rows.pick(np.array([1, -1, -1]), np.zeros(3), 3)

    def test_choose_follows_running_counts(self):
        table = _table()
        hot = HotRows(table, 2)  # starts as ids [0, 1]
        served = np.zeros(100, np.float32)
        local = table.partition.local_index(np.array([10, 20, 30]))
        served[local] = [5.0, 7.0, 6.0]
        hot.served_counts.assign(served)
        # Id 1 was used 9 times while hot: it stays; id 0 (never) leaves.
        hot.hot_counts.assign([0.0, 9.0])
        np.testing.assert_array_equal(hot.choose(), [1, 20])
        np.testing.assert_array_equal(hot.ids.numpy(), [1, 20])
        np.testing.assert_array_equal(hot.hot_counts.numpy(), [0, 0])
        counts = hot.served_counts.numpy()
        self.assertEqual(counts[table.partition.local_index(np.array([1]))], 9)


class OptionTest(TestCase):
    def test_strategy_checks_hot_rows(self):
        with self.assertRaisesRegex(ValueError, "must be >= 0"):
            kh.HybridStrategy(hot_rows=-1)
        with self.assertRaisesRegex(TypeError, "must be an int"):
            kh.HybridStrategy(hot_rows=2.0)

    def test_refresh_interval_must_be_positive(self):
        with self.assertRaisesRegex(ValueError, "positive int"):
            HotRowsRefresh(every=0)

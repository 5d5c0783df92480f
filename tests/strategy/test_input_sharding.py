"""How a global batch is split among workers."""

import collections

import keras
import numpy as np
import tensorflow as tf
from keras.src.trainers.data_adapters import array_data_adapter

from keras_hybrid.strategy import input_sharding
from keras_hybrid.testing import TestCase


def _rows(dataset):
    return [batch.numpy().tolist() for batch in dataset]


class ShardDatasetTest(TestCase):
    def test_each_worker_gets_its_slice_of_every_global_batch(self):
        data = tf.data.Dataset.range(10).batch(4)
        shards = [
            _rows(input_sharding.shard_dataset(data, r, 2)) for r in range(2)
        ]
        self.assertEqual(shards[0], [[0, 1], [4, 5], [8]])
        self.assertEqual(shards[1], [[2, 3], [6, 7], [9]])

    def test_small_last_batch_gives_empty_slices_not_fewer_steps(self):
        data = tf.data.Dataset.range(9).batch(4)  # last batch: [8]
        shards = [
            _rows(input_sharding.shard_dataset(data, r, 3)) for r in range(3)
        ]
        self.assertEqual([len(s) for s in shards], [3, 3, 3])
        self.assertEqual([s[-1] for s in shards], [[], [], [8]])

    def test_tuples_are_sliced_together(self):
        x = np.arange(12).reshape(6, 2)
        data = tf.data.Dataset.from_tensor_slices((x, np.arange(6))).batch(6)
        ((xs, ys),) = list(input_sharding.shard_dataset(data, 1, 3))
        self.assertEqual(ys.numpy().tolist(), [2, 3])
        self.assertEqual(xs.numpy().tolist(), [[4, 5], [6, 7]])

    def test_every_element_keeps_its_structure(self):
        # Keras' `predict` on a list of inputs gives `((a, b),)` elements:
        # a one-tuple that must stay one, or `predict_step` reads `b` as
        # the labels.
        a, b = np.arange(6), np.arange(6, 12)
        pair = collections.namedtuple("Pair", "a b")
        elements = ((a,), ((a, b),), (a, b), {"a": a, "b": b}, a, pair(a, b))
        for element in elements:
            data = tf.data.Dataset.from_tensors(element)
            shard = input_sharding.shard_dataset(data, 1, 2)
            tf.nest.assert_same_structure(shard.element_spec, data.element_spec)
            (got,) = list(shard)
            self.assertEqual(
                tf.nest.map_structure(lambda t: t.numpy().tolist(), got),
                tf.nest.map_structure(lambda t: t[3:].tolist(), element),
            )

    def test_predict_on_a_list_of_inputs_gets_both_inputs(self):
        a, b = np.arange(6), np.arange(6, 12)
        adapter = array_data_adapter.ArrayDataAdapter([a, b], batch_size=6)
        (element,) = list(
            input_sharding.shard_dataset(adapter.get_tf_dataset(), 1, 2)
        )
        # What `predict_step` takes apart: x, and no labels.
        x, y, _ = keras.utils.unpack_x_y_sample_weight(element)
        self.assertIsNone(y)
        self.assertEqual(
            [t.numpy().tolist() for t in x], [[3, 4, 5], [9, 10, 11]]
        )

    def test_off_policy_leaves_the_dataset_alone(self):
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.OFF
        )
        data = tf.data.Dataset.range(4).batch(2).with_options(options)
        self.assertEqual(
            _rows(input_sharding.shard_dataset(data, 1, 2)), [[0, 1], [2, 3]]
        )

    def test_a_pipeline_sharded_by_worker_is_used_as_given(self):
        # A script written for Horovod: `shard(size, rank)` before batching
        # (here of the file list an interleave reads).
        files = tf.data.Dataset.range(4).shard(2, 1)
        data = files.interleave(
            lambda f: tf.data.Dataset.range(3).map(lambda x: x + 10 * f)
        )
        data = data.map(lambda x: x + 1).batch(2)
        self.assertEqual(
            _rows(input_sharding.shard_dataset(data, 1, 2)),
            [[11, 31], [12, 32], [13, 33]],
        )
        # Another worker's shard, or another worker count, is sliced.
        self.assertEqual(
            _rows(input_sharding.shard_dataset(data, 0, 2)),
            [[11], [12], [13]],
        )
        self.assertEqual(
            _rows(input_sharding.shard_dataset(data, 2, 3)),
            [[31], [32], [33]],
        )

    def test_keras_shuffled_arrays_split_disjointly_with_one_seed(self):
        # Workers share the TF seed (HybridStrategy broadcasts it), so their
        # shuffles agree and the slices cover every sample exactly once.
        seen = []
        for rank in range(3):
            tf.random.set_seed(42)
            adapter = array_data_adapter.ArrayDataAdapter(
                np.arange(30), batch_size=6, shuffle=True
            )
            shard = input_sharding.shard_dataset(
                adapter.get_tf_dataset(), rank, 3
            )
            seen += [v for batch in shard for v in batch.numpy().tolist()]
        self.assertEqual(sorted(seen), list(range(30)))

    def test_split_sizes(self):
        self.assertEqual(input_sharding.split_sizes(64, 3), [21, 21, 22])
        self.assertEqual(input_sharding.split_sizes(2, 3), [0, 1, 1])

"""The capacity ladder and the content-derived instance keys."""

import numpy as np
import tensorflow as tf

from keras_hybrid.comm import capacity
from keras_hybrid.comm import instance_keys
from keras_hybrid.comm import ladder
from keras_hybrid.testing import TestCase

INT32_MAX = 2**31 - 1


def _ladder(counts):
    """(index, capacity) for a numpy vector of counts, as numpy arrays."""
    index = capacity.bucket_index(tf.constant(counts, tf.int64))
    return index.numpy(), capacity.bucket_capacity(index).numpy()


def _large_counts():
    """Counts around every power of two below 2**30, and random ones."""
    around = [2**k + d for k in range(31) for d in (-1, 0, 1)]
    rng = np.random.default_rng(0)
    counts = np.concatenate([around, rng.integers(0, 2**30, size=10_000)])
    return np.unique(counts[(counts >= 0) & (counts < 2**30)])


class CapacityLadderTest(TestCase):
    def test_every_count_up_to_200000(self):
        counts = np.arange(0, 200_001, dtype=np.int64)
        index, cap = _ladder(counts)
        self.assertTrue((cap >= counts).all())
        self.assertTrue((np.diff(cap) >= 0).all(), "capacity not monotone")
        self.assertTrue((np.diff(index) >= 0).all(), "index not monotone")
        # A capacity is its own bucket's capacity: its index is the same.
        again, _ = _ladder(cap)
        np.testing.assert_array_equal(again, index)
        small = counts <= 32
        np.testing.assert_array_equal(cap[small], counts[small])
        np.testing.assert_array_equal(index[small], counts[small])
        large = ~small
        self.assertTrue(
            ((cap[large] - counts[large]) * 16 < counts[large]).all(),
            "padding above 32 must stay below 1/16 of the count",
        )

    def test_large_counts_stay_on_the_ladder(self):
        counts = _large_counts()
        index, cap = _ladder(counts)
        self.assertTrue((index >= 0).all())
        self.assertTrue((index < ladder.NUM_BUCKETS).all())
        self.assertTrue((cap >= counts).all())
        self.assertTrue((cap <= INT32_MAX).all())
        large = counts > 32
        self.assertTrue(
            ((cap[large] - counts[large]) * 16 < counts[large]).all()
        )
        again, _ = _ladder(cap)
        np.testing.assert_array_equal(again, index)

    def test_hand_checked_examples(self):
        # Above 32 the ladder has 16 steps per power of two:
        # 34, 36, ..., 64, then 68, 72, ..., 128, then 136, ...
        examples = {
            0: 0,
            1: 1,
            32: 32,
            33: 34,
            34: 34,
            35: 36,
            64: 64,
            65: 68,
            128: 128,
            129: 136,
            1000: 1024,
            1025: 1088,
        }
        counts = np.array(list(examples), np.int64)
        _, cap = _ladder(counts)
        self.assertEqual(
            dict(zip(examples, cap.tolist(), strict=True)), examples
        )
        np.testing.assert_array_equal(
            capacity.capacity_for(tf.constant(counts)).numpy(), cap
        )

    def test_capacities_of_the_reachable_ladder_are_distinct(self):
        top = int(capacity.bucket_index(2**30 - 1))
        caps = capacity.bucket_capacity(tf.range(top + 1)).numpy()
        self.assertTrue((np.diff(caps) > 0).all(), "two buckets share a size")

    def test_pairwise_blocks_are_never_empty(self):
        # Empty pairwise broadcasts crashed TF 2.21 (SIGSEGV, recommender on
        # 4 workers); above zero the pairwise rows are the ladder's.
        counts = tf.constant([0, 1, 2, 32, 33, 65])
        np.testing.assert_array_equal(
            capacity.pair_capacity_for(counts).numpy(), [1, 1, 2, 32, 34, 68]
        )

    def test_numpy_capacities_equal_the_graph_ops(self):
        # Cost models price with `capacities_of`; the exchange pads with the
        # graph ops. They must agree on every bucket edge and between.
        rng = np.random.default_rng(0)
        counts = np.concatenate(
            [np.arange(5000), rng.integers(0, 2**30, 20000)]
        ).astype(np.int64)
        for pairwise, rule in (
            (False, capacity.capacity_for),
            (True, capacity.pair_capacity_for),
        ):
            np.testing.assert_array_equal(
                ladder.capacities_of(counts, pairwise),
                rule(tf.constant(counts)).numpy(),
            )
        self.assertEqual(ladder.capacities_of(2**30 - 1).shape, ())

    def test_works_inside_tf_function(self):
        fn = tf.function(capacity.capacity_for)
        self.assertEqual(int(fn(tf.constant(65))), 68)
        self.assertEqual(int(fn(tf.constant(7))), 7)


class InstanceKeysTest(TestCase):
    def _trace_keys(self, keys, contents):
        """Keys handed out while tracing one new tf.function."""
        out = []

        @tf.function
        def fn():
            out.extend(keys.base_key(c) for c in contents)
            return tf.constant(0)

        fn()
        return out

    def test_same_content_twice_in_one_trace_gets_two_keys(self):
        keys = instance_keys.InstanceKeys()
        first, second = self._trace_keys(keys, ["all_reduce/x"] * 2)
        self.assertNotEqual(first, second)

    def test_two_traces_get_the_same_sequence_of_keys(self):
        keys = instance_keys.InstanceKeys()
        contents = ["a", "b", "a", "c", "b", "a"]
        one = self._trace_keys(keys, contents)
        two = self._trace_keys(keys, contents)
        self.assertEqual(one, two)
        # A different InstanceKeys (another process) agrees as well.
        other = self._trace_keys(instance_keys.InstanceKeys(), contents)
        self.assertEqual(one, other)
        self.assertEqual(len(set(one)), len(contents))

    def test_eager_calls_reuse_the_key_of_their_content(self):
        keys = instance_keys.InstanceKeys()
        self.assertEqual(keys.base_key("a"), keys.base_key("a"))
        # The eager key is the first key a graph gives the same content.
        self.assertEqual(self._trace_keys(keys, ["a"]), [keys.base_key("a")])

    def test_different_contents_get_different_keys(self):
        keys = instance_keys.InstanceKeys()
        contents = [f"all_gather/float32[{i}]" for i in range(200)]
        values = [keys.base_key(c) for c in contents]
        self.assertEqual(len(set(values)), len(values))

    def test_keys_fit_int32_and_leave_room_for_every_bucket(self):
        slots = instance_keys._BUCKET_SLOTS
        self.assertGreaterEqual(slots, ladder.NUM_BUCKETS)
        keys = instance_keys.InstanceKeys()
        for i in range(500):
            key = keys.base_key(f"content {i}")
            self.assertGreater(key, 0)
            self.assertEqual(key % slots, 0)
            self.assertLessEqual(key + ladder.NUM_BUCKETS - 1, INT32_MAX)

    def test_bucketed_key_adds_the_bucket_index(self):
        keys = instance_keys.InstanceKeys()
        base = keys.base_key("all_to_all/float32[3]")
        key, cap = keys.bucketed_key(base, tf.constant(65))
        index = int(capacity.bucket_index(65))
        self.assertEqual(int(key), base + index)
        self.assertEqual(int(cap), 68)

    def test_describe(self):
        a = tf.zeros([3, 4], tf.float32)
        b = tf.zeros([7, 4], tf.float32)
        c = tf.zeros([2], tf.int64)
        self.assertEqual(
            instance_keys.describe([a, c]), "float32[3x4],int64[2]"
        )
        self.assertNotEqual(
            instance_keys.describe([a]), instance_keys.describe([b])
        )
        self.assertEqual(
            instance_keys.describe([a], rows_vary=True),
            instance_keys.describe([b], rows_vary=True),
        )
        self.assertEqual(
            instance_keys.describe([a], rows_vary=True), "float32[4]"
        )
        spec = tf.TensorSpec([None, None, 5], tf.float64)
        self.assertEqual(
            instance_keys.describe([spec], rows_vary=True), "float64[?x5]"
        )

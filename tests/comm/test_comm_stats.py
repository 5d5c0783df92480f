"""`CommStats`: per-path byte and call counters."""

import tensorflow as tf

from keras_hybrid.comm import PATHS
from keras_hybrid.comm import CommStats
from keras_hybrid.testing import TestCase


def _zeros():
    return {path: {"bytes": 0, "calls": 0} for path in PATHS}


class CommStatsTest(TestCase):
    def test_starts_at_zero(self):
        self.assertEqual(CommStats().snapshot(), _zeros())

    def test_record_snapshot_delta_reset(self):
        stats = CommStats()
        stats.record("dense", 100)
        stats.record("dense", 20)
        stats.record("padding", 7, calls=0)
        stats.record("sparse_push", tf.constant(5, tf.int32), calls=3)
        before = stats.snapshot()
        expected = _zeros()
        expected["dense"] = {"bytes": 120, "calls": 2}
        expected["padding"] = {"bytes": 7, "calls": 0}
        expected["sparse_push"] = {"bytes": 5, "calls": 3}
        self.assertEqual(before, expected)
        for value in before.values():
            self.assertIs(type(value["bytes"]), int)

        stats.record("ids", tf.constant(2**40, tf.int64))
        stats.record("dense", 1)
        delta = stats.delta(before)
        expected = _zeros()
        expected["ids"] = {"bytes": 2**40, "calls": 1}
        expected["dense"] = {"bytes": 1, "calls": 1}
        self.assertEqual(delta, expected)
        # `before` is a copy, not a view of the counters.
        self.assertEqual(before["dense"]["bytes"], 120)

        stats.reset()
        self.assertEqual(stats.snapshot(), _zeros())

    def test_instances_count_separately(self):
        a, b = CommStats(), CommStats()
        a.record("control", 4)
        self.assertEqual(b.snapshot(), _zeros())

    def test_counts_every_call_of_a_tf_function(self):
        stats = CommStats()

        @tf.function
        def step(x):
            stats.record("dense", tf.size(x) * 4)
            stats.record("padding", 3, calls=0)
            return x + 1

        for rows in (2, 2, 5):
            step(tf.zeros([rows]))
        snap = stats.snapshot()
        self.assertEqual(snap["dense"], {"bytes": (2 + 2 + 5) * 4, "calls": 3})
        self.assertEqual(snap["padding"], {"bytes": 9, "calls": 0})

    def test_unknown_path_raises(self):
        with self.assertRaises(ValueError):
            CommStats().record("nope", 1)

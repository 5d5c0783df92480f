"""`CommStats`: per-path byte and call counters."""

import tensorflow as tf

from keras_hybrid.comm import PATHS
from keras_hybrid.comm import CommStats
from keras_hybrid.testing import TestCase


def _zeros():
    return {
        path: {"bytes": 0, "received_bytes": 0, "calls": 0} for path in PATHS
    }


def _entry(sent, calls, received=None):
    received = sent if received is None else received
    return {"bytes": sent, "received_bytes": received, "calls": calls}


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
        expected["dense"] = _entry(120, 2)
        expected["padding"] = _entry(7, 0)
        expected["sparse_push"] = _entry(5, 3)
        self.assertEqual(before, expected)
        for value in before.values():
            self.assertIs(type(value["bytes"]), int)

        stats.record("ids", tf.constant(2**40, tf.int64))
        stats.record("dense", 1)
        delta = stats.delta(before)
        expected = _zeros()
        expected["ids"] = _entry(2**40, 1)
        expected["dense"] = _entry(1, 1)
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
        self.assertEqual(snap["dense"], _entry((2 + 2 + 5) * 4, 3))
        self.assertEqual(snap["padding"], _entry(9, 0))

    def test_received_bytes_default_to_sent(self):
        stats = CommStats()
        stats.record("sparse_pull", 10, received_bytes=tf.constant(3))
        stats.record("sparse_pull", 5)
        stats.record("padding", 2, calls=0, received_bytes=0)
        snap = stats.snapshot()
        self.assertEqual(snap["sparse_pull"], _entry(15, 2, received=8))
        self.assertEqual(snap["padding"], _entry(2, 0, received=0))

    def test_rows_served(self):
        stats = CommStats()

        @tf.function
        def serve(ids):
            stats.record_rows_served(tf.shape(ids)[0])
            return ids

        serve(tf.zeros([3]))
        serve(tf.zeros([4]))
        self.assertEqual(stats.rows_served(), 7)
        stats.reset()
        self.assertEqual(stats.rows_served(), 0)

    def test_unknown_path_raises(self):
        with self.assertRaises(ValueError):
            CommStats().record("nope", 1)


class CrossHostStatsTest(TestCase):
    def test_record_snapshot_delta_reset(self):
        stats = CommStats()
        before = stats.cross_host_snapshot()
        self.assertEqual(
            before,
            {p: {"bytes": 0, "received_bytes": 0} for p in PATHS},
        )
        stats.record_cross_host("ids", 8, 16)
        stats.record_cross_host("ids", tf.constant(2, tf.int32), 0)
        delta = stats.cross_host_delta(before)
        self.assertEqual(delta["ids"], {"bytes": 10, "received_bytes": 16})
        self.assertEqual(delta["dense"], {"bytes": 0, "received_bytes": 0})
        # The per-path counters are separate.
        self.assertEqual(stats.snapshot()["ids"]["bytes"], 0)
        stats.reset()
        self.assertEqual(stats.cross_host_snapshot(), before)

    def test_unknown_path_raises(self):
        with self.assertRaisesRegex(ValueError, "`path` must be one of"):
            CommStats().record_cross_host("nope", 1, 1)

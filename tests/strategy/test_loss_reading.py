"""How `loss_reading` reads a scalar a train step makes: a sum (the
workers' gradients are summed), a mean (averaged), or a `Sum` divided by
its own static row count, decided by the global batch when the step runs.
The multi-worker results are in `test_train_steps_multiprocess.py`."""

import tensorflow as tf
from keras import ops

from keras_hybrid.strategy import loss_reading
from keras_hybrid.testing import TestCase

SUM, MEAN = loss_reading.SUM, loss_reading.MEAN


def _readings(*losses_of, rows=8) -> list:
    """The reading of each `loss_of(x)`, traced on a `[rows, 3]` input
    (`rows=None`: unknown when traced)."""
    out = []

    @tf.function(input_signature=[tf.TensorSpec([rows, 3])])
    def step(x):
        for loss_of in losses_of:
            out.append(loss_reading.reading(loss_of(x)))
        return x

    step(tf.ones((8, 3)))
    return out


class ReadingTest(TestCase):
    def test_sums_scaled_by_constants_are_sums(self):
        got = _readings(
            lambda x: ops.sum(x),
            lambda x: ops.sum(x) / 64,
            lambda x: ops.sum(x) * (1.0 / 64),
            lambda x: 2.0 * ops.sum(x),
            lambda x: ops.sum(x[:, 0]) / 64 - ops.sum(x[:, 1]) / 64,
            lambda x: -ops.sum(x),
            lambda x: ops.sum(ops.cast(x, "float64")) / 64,
            lambda x: ops.divide_no_nan(ops.sum(x), 64.0),
        )
        # (`tf.nn.compute_average_loss` needs no reading: it counts as a
        # loss scaled for distribution.)
        self.assertEqual(got, [SUM] * 8)

    def test_row_counts_are_sums(self):
        # The batch's rows, as a custom step returns them in its logs:
        # the workers' counts add up to one process's.
        got = _readings(
            lambda x: ops.cast(ops.shape(x)[0], "float32"),
            lambda x: tf.cast(tf.size(x), tf.float32),
            lambda x: 2.0 * ops.cast(tf.shape(x)[0], "float32"),
            lambda x: ops.sum(x) + ops.cast(ops.shape(x)[0], "float32"),
            rows=None,
        )
        self.assertEqual(got, [SUM] * 4)

    def test_other_sizes_are_means(self):
        # A sequence length is the same on every worker.
        seq = _readings(
            lambda x: ops.cast(tf.shape(x)[1], "float32"), rows=None
        )
        self.assertEqual(seq, [MEAN])

    def test_means_are_means(self):
        got = _readings(
            lambda x: ops.mean(x),
            lambda x: ops.sum(x) / ops.cast(ops.shape(x)[0], "float32"),
            lambda x: ops.mean(x) + ops.sum(x) / 64,
            lambda x: ops.sum(x) * ops.sum(x),
            lambda x: ops.max(x),
            rows=None,
        )
        self.assertEqual(got, [MEAN] * 5)

    def test_a_sum_divided_by_its_static_rows_waits_for_the_batch(self):
        # `ops.sum(x) / x.shape[0]`: a mean of this worker's rows, unless
        # the global batch has that many rows (a constant global size).
        got = _readings(
            lambda x: ops.sum(x) / x.shape[0],
            lambda x: ops.sum(x) / 24,  # all 8 * 3 elements
            lambda x: ops.sum(x) * 0.125 + ops.sum(x) / 64,
            lambda x: ops.sum(x) / 8 + ops.mean(x),
        )
        self.assertEqual(got, [8.0, 24.0, 8.0, MEAN])

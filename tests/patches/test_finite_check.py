"""`finite_check` in one process: installed by the registry, and the
verdict.

The multi-worker behaviour (one rank sees an inf, every rank skips) is in
`tests/sparse/test_mixed_precision_multiprocess.py`.
"""

import keras
import numpy as np
import tensorflow as tf

from keras_hybrid.patches import finite_check
from keras_hybrid.patches import registry
from keras_hybrid.testing import TestCase

_KERAS_CHECK = keras.optimizers.LossScaleOptimizer.check_finite


class _FakeCommunicator:
    """Sums like N workers that all hold the same value as this one,
    plus `others_not_finite` workers whose gradients are not finite."""

    def __init__(self, size, others_not_finite=0):
        self.size = size
        self.others_not_finite = others_not_finite
        self.calls = []

    def all_reduce(self, tensors, op="sum", path="dense"):
        self.calls.append((op, path, [t.dtype for t in tensors]))
        return [t + self.others_not_finite for t in tensors]


class FiniteCheckTest(TestCase):
    def test_installed_and_restored_by_the_registry(self):
        with registry.installing(None, finite_check.PATCHES):
            patched = keras.optimizers.LossScaleOptimizer.check_finite
            self.assertIsNot(patched, _KERAS_CHECK)
        self.assertIs(
            keras.optimizers.LossScaleOptimizer.check_finite, _KERAS_CHECK
        )
        # Keras defines it on the class itself: restored, not deleted.
        self.assertIn("check_finite", vars(keras.optimizers.LossScaleOptimizer))

    def test_without_hybrid_strategy_the_verdict_is_keras(self):
        with registry.installing(None, finite_check.PATCHES):
            opt = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD())
            finite = [tf.constant([1.0, 2.0])]
            inf = [tf.constant([1.0, np.inf]), None]
            self.assertTrue(bool(opt.check_finite(finite)))
            self.assertFalse(bool(opt.check_finite(inf)))

    def test_all_workers_finite_is_false_if_any_worker_is_not(self):
        yes, no = tf.constant(True), tf.constant(False)
        alone = _FakeCommunicator(size=1)
        self.assertTrue(bool(finite_check.all_workers_finite(yes, alone)))
        self.assertEqual(alone.calls, [])
        everyone = _FakeCommunicator(size=2)
        self.assertTrue(bool(finite_check.all_workers_finite(yes, everyone)))
        self.assertFalse(bool(finite_check.all_workers_finite(no, everyone)))
        self.assertEqual(everyone.calls[0], ("sum", "control", [tf.float32]))
        # This worker is finite, another is not: both must skip.
        other = _FakeCommunicator(size=2, others_not_finite=1)
        self.assertFalse(bool(finite_check.all_workers_finite(yes, other)))

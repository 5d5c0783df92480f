"""Shared `TestCase`: resets Keras state between tests."""

import os
import unittest
from unittest import mock

import keras
import numpy as np

from keras_hybrid.patches import registry


class TestCase(unittest.TestCase):
    """Clears Keras' session and seeds before each test, and closes the
    strategies a test left open (a strategy of one process holds a Keras
    patch until it is closed or collected)."""

    def setUp(self) -> None:
        super().setUp()
        keras.backend.clear_session()
        keras.utils.set_random_seed(1337)
        self._open_before = {id(s) for s in registry.open_strategies()}

    def tearDown(self) -> None:
        for strategy in registry.open_strategies():
            if id(strategy) not in self._open_before:
                strategy.close()
        keras.backend.clear_session()
        super().tearDown()

    def assertAllClose(self, actual, expected, atol=1e-5, msg=None):
        np.testing.assert_allclose(
            np.asarray(actual),
            np.asarray(expected),
            atol=atol,
            rtol=0,
            err_msg=msg or "",
        )


class OneProcessTestCase(TestCase):
    """A `TestCase` that hides any cluster from the environment, so a
    `HybridStrategy` built in the test is a plain single process."""

    def setUp(self) -> None:
        super().setUp()
        patcher = mock.patch.dict(os.environ)
        patcher.start()
        self.addCleanup(patcher.stop)
        os.environ.pop("TF_CONFIG", None)
        os.environ.pop("KERAS_HYBRID_ENGINE", None)

"""Keras is patched only while a strategy is open, in one process.

Patches go in only when a strategy has more than one worker, which needs
real peers; here `keras_patches` is driven with fake strategies, and
`close_multiprocess_worker.py` closes a real 2-worker strategy.
"""

import gc
import os
import sys

import keras

from keras_hybrid import HybridStrategy
from keras_hybrid.comm import call_fence
from keras_hybrid.patches import registry
from keras_hybrid.strategy import cluster
from keras_hybrid.testing import OneProcessTestCase
from keras_hybrid.testing import TestCase

sys.path.insert(
    0, os.path.join(os.path.dirname(__file__), "..", "strategy", "workers")
)
from stock_keras import keras_objects  # noqa: E402


class _Communicator:
    rank, size, timeout_seconds = 0, 2, 30.0


class _Strategy:
    """What the patches read of a strategy: rank 0 of 2, no watchdog."""

    rank, size, is_chief, engine = 0, 2, True, "horovod"

    def __init__(self) -> None:
        self.communicator = _Communicator()


class _Watchdog:
    stopped = False

    def stop(self) -> None:
        self.stopped = True


class KerasPatchesTest(TestCase):
    def setUp(self) -> None:
        super().setUp()
        self.stock = keras_objects()
        self.addCleanup(self._release_all)

    def _release_all(self) -> None:
        for strategy in list(getattr(self, "opened", [])):
            registry.release(strategy)

    def acquire(self, strategy) -> None:
        self.opened = [*getattr(self, "opened", []), strategy]
        registry.acquire(strategy)

    def assertStock(self) -> None:
        now = keras_objects()
        for name, stock in self.stock.items():
            self.assertIs(now[name], stock, msg=name)
        self.assertIsNone(call_fence.active())

    def assertPatched(self) -> None:
        now = keras_objects()
        for name, stock in self.stock.items():
            self.assertIsNot(now[name], stock, msg=name)
        self.assertIsNotNone(call_fence.active())

    def test_release_restores_every_stock_object(self):
        strategy = _Strategy()
        self.acquire(strategy)
        self.assertPatched()
        registry.release(strategy)
        self.assertStock()
        registry.release(strategy)  # idempotent
        self.assertStock()

    def test_a_later_strategy_installs_again(self):
        first = _Strategy()
        self.acquire(first)
        registry.release(first)
        second = _Strategy()
        self.acquire(second)
        self.assertPatched()
        registry.release(second)
        self.assertStock()

    def test_patches_stay_until_the_last_strategy_closes(self):
        a, b = _Strategy(), _Strategy()
        self.acquire(a)
        self.acquire(b)
        self.acquire(b)  # counted once
        self.assertEqual(registry.open_count(), 2)
        self.assertIs(call_fence.active().communicator, b.communicator)
        registry.release(b)
        self.assertPatched()
        # The patches follow the strategy still open.
        self.assertIs(call_fence.active().communicator, a.communicator)
        registry.release(a)
        self.assertStock()

    def test_a_collected_strategy_no_longer_counts(self):
        b = _Strategy()
        registry.acquire(_Strategy())  # never closed, then collected
        self.acquire(b)
        gc.collect()
        self.assertEqual(registry.open_count(), 1)
        registry.release(b)
        self.assertStock()

    def test_the_last_close_stops_the_watchdog(self):
        watchdog = _Watchdog()
        original = cluster._watchdog
        self.addCleanup(setattr, cluster, "_watchdog", original)
        cluster._watchdog = watchdog
        a, b = _Strategy(), _Strategy()
        self.acquire(a)
        self.acquire(b)
        registry.release(a)
        self.assertFalse(watchdog.stopped)
        registry.release(b)
        self.assertTrue(watchdog.stopped)
        self.assertIsNone(cluster.watchdog())


class CloseTest(OneProcessTestCase):
    def test_context_manager_returns_and_closes_the_strategy(self):
        stock = keras_objects()
        with HybridStrategy() as strategy:
            self.assertIsInstance(strategy, HybridStrategy)
            self.assertFalse(strategy.closed)
            with strategy.scope():
                model = keras.Sequential([keras.layers.Dense(1)])
                model.compile(optimizer="sgd", loss="mse")
        self.assertTrue(strategy.closed)
        strategy.close()  # idempotent
        self.assertTrue(strategy.closed)
        now = keras_objects()
        for name, obj in stock.items():
            self.assertIs(now[name], obj, msg=name)

    def test_exit_closes_even_on_error(self):
        with self.assertRaisesRegex(KeyError, "boom"):
            with HybridStrategy() as strategy:
                raise KeyError("boom")
        self.assertTrue(strategy.closed)

"""The patch registry in one process: in while a strategy is open, out in
reverse order when the last one closes.

Patches go in only when a strategy has more than one worker, which needs
real peers; here the registry is driven with fake strategies, and
`test_close_multiprocess.py` closes real ones of every kind.
"""

import gc
import os
import sys

import keras

from keras_hybrid import HybridStrategy
from keras_hybrid.comm import call_fence
from keras_hybrid.patches import registry
from keras_hybrid.patches.patch_set import Patch
from keras_hybrid.patches.patch_set import PatchSet
from keras_hybrid.strategy import cluster
from keras_hybrid.testing import OneProcessTestCase
from keras_hybrid.testing import TestCase

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "workers"))
from stock_objects import ELASTIC_ONLY  # noqa: E402
from stock_objects import stock_objects as keras_objects  # noqa: E402


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


class RegistryTest(TestCase):
    def setUp(self) -> None:
        super().setUp()
        # A strategy of one process an earlier test left to the collector
        # holds its patch until then.
        registry.forget_collected()
        self.stock = keras_objects()
        self.addCleanup(self._release_all)

    def _release_all(self) -> None:
        for strategy in list(getattr(self, "opened", [])):
            registry.release(strategy)

    def acquire(self, strategy, elastic=False) -> None:
        self.opened = [*getattr(self, "opened", []), strategy]
        registry.acquire(strategy, elastic=elastic)

    def assertStock(self) -> None:
        now = keras_objects()
        for name, stock in self.stock.items():
            self.assertIs(now[name], stock, msg=name)
        self.assertIsNone(call_fence.active())
        self.assertEqual(registry.installed(), [])

    def assertPatched(self, elastic=False) -> None:
        now = keras_objects()
        for name, stock in self.stock.items():
            if name in ELASTIC_ONLY and not elastic:
                self.assertIs(now[name], stock, msg=name)
            else:
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

    def test_one_process_needs_only_its_sets(self):
        alone, several = _Strategy(), _Strategy()
        self.opened = [alone, several]
        registry.acquire(alone, one_process=True)
        one = [s.name for s in registry.SETS if s.one_process]
        self.assertEqual(one, ["build_from_spec"])
        self.assertEqual(registry.installed(), one)
        self.assertIsNone(call_fence.active())
        registry.acquire(several)
        self.assertPatched()
        registry.release(several)
        self.assertEqual(registry.installed(), one)
        registry.release(alone)
        self.assertStock()

    def test_elastic_patches_go_on_top_and_come_off_first(self):
        plain, elastic = _Strategy(), _Strategy()
        self.acquire(plain)
        fit = keras.Model.fit
        self.acquire(elastic, elastic=True)
        self.assertPatched(elastic=True)
        self.assertEqual(registry.installed()[-1], "elastic_training")
        # Elastic `fit` wraps the fenced one.
        self.assertIsNot(keras.Model.fit, fit)
        registry.release(elastic)
        self.assertPatched()
        self.assertIs(keras.Model.fit, fit)
        self.assertNotIn("elastic_training", registry.installed())
        registry.release(plain)
        self.assertStock()

    def test_an_elastic_strategy_alone_restores_every_object(self):
        # The attributes patched twice (`Model.fit`, the loss scale) get
        # back what they held before the first patch.
        elastic = _Strategy()
        self.acquire(elastic, elastic=True)
        self.assertPatched(elastic=True)
        registry.release(elastic)
        self.assertStock()

    def test_installing_one_set_alone_is_refused_while_a_strategy_holds(self):
        strategy = _Strategy()
        self.acquire(strategy)
        with self.assertRaisesRegex(RuntimeError, "Cannot install"):
            with registry.installing(strategy, registry.SETS[0]):
                pass
        registry.release(strategy)
        self.assertStock()


class ReverseOrderTest(TestCase):
    """Two sets patching one attribute, each wrapping what it found."""

    def setUp(self) -> None:
        super().setUp()

        class Target:
            def method(self):
                return ["stock"]

        class Child(Target):
            pass

        self.Target, self.Child = Target, Child

    def _wrapping(self, tag):
        def replacement(original):
            def method(obj):
                return [*original(obj), tag]

            return method

        return replacement

    def test_each_set_wraps_the_last_and_restores_in_reverse(self):
        first = PatchSet(
            "first", (Patch(self.Child, "method", self._wrapping("a")),)
        )
        second = PatchSet(
            "second", (Patch(self.Child, "method", self._wrapping("b")),)
        )
        with registry.installing(None, first, second):
            self.assertEqual(self.Child().method(), ["stock", "a", "b"])
            self.assertIn("method", vars(self.Child))
        # Inherited before: the override is deleted, not left as a copy.
        self.assertNotIn("method", vars(self.Child))
        self.assertEqual(self.Child().method(), ["stock"])

    def test_follow_sees_the_strategy_then_none(self):
        seen = []
        followed = PatchSet(
            "followed",
            (Patch(self.Target, "method", self._wrapping("x")),),
            follow=seen.append,
        )
        stock = vars(self.Target)["method"]
        with registry.installing("strategy", followed):
            self.assertEqual(seen, ["strategy"])
        self.assertEqual(seen, ["strategy", None])
        self.assertIs(vars(self.Target)["method"], stock)


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

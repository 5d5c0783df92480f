"""`CallFence` messages, nesting and the Keras patches, in one process.

The records of the other workers come from a fake communicator; the real
collectives run in `test_call_fence_multiprocess.py`.
"""

import os
import tempfile

import keras
import numpy as np
import tensorflow as tf

from keras_hybrid.comm import call_fence
from keras_hybrid.comm.call_fence import CALLS
from keras_hybrid.comm.call_fence import CallFence
from keras_hybrid.patches import chief_summaries
from keras_hybrid.patches import collective_calls
from keras_hybrid.patches import registry
from keras_hybrid.testing import TestCase

_MAGIC = call_fence._MAGIC


class _FakeCommunicator:
    """Rank 0 of `size`; `peers` gives the other ranks' (call, count)."""

    def __init__(self, peers, size=2, error=None):
        self.rank, self.size = 0, size
        self.peers = peers
        self.error = error
        self.gathered = 0

    def gather_fixed(self, record, path="control"):
        del path
        self.gathered += 1
        if self.error is not None:
            raise self.error
        rows = [record.numpy()]
        for rank, (name, count) in enumerate(self.peers, start=1):
            rows.append([_MAGIC, CALLS.index(name), count, rank])
        return tf.constant(np.concatenate(rows), tf.int64)


class _FakeWatchdog:
    def __init__(self, exited):
        self.exited = exited

    def unreachable_peers(self):
        return self.exited


def _timeout(message="Collective has timed out during execution."):
    return tf.errors.DeadlineExceededError(None, None, message)


class CallFenceTest(TestCase):
    def test_same_call_on_every_rank_passes(self):
        comm = _FakeCommunicator([("model.predict", 1)])
        fence = CallFence(comm, 30.0)
        with fence.fenced("model.predict"):
            pass
        self.assertEqual((fence.count, comm.gathered), (1, 1))

    def test_different_calls_name_each_rank(self):
        comm = _FakeCommunicator([("model.save", 1), ("model.save", 1)], size=3)
        fence = CallFence(comm, 30.0)
        with self.assertRaisesRegex(
            RuntimeError,
            r"rank 0 called model.get_weights, rank 1 called model.save, "
            r"rank 2 called model.save\. Call model.get_weights on every "
            r"worker.*docs/migrating.md",
        ):
            with fence.fenced("model.get_weights"):
                self.fail("the call must not run")

    def test_an_extra_call_on_one_rank_shows_in_the_counts(self):
        comm = _FakeCommunicator([("model.predict", 2)])
        with self.assertRaisesRegex(
            RuntimeError,
            r"rank 0 called model.predict \(its fenced call #1\), rank 1 "
            r"called model.predict \(its fenced call #2\)",
        ):
            CallFence(comm, 30.0).agree("model.predict")

    def test_pairing_with_another_collective_is_named(self):
        comm = _FakeCommunicator([("model.fit", 1)])
        comm.gather_fixed = lambda record, path="control": tf.constant(
            np.concatenate([record.numpy(), [7, 7, 7, 7]]), tf.int64
        )
        with self.assertRaisesRegex(
            RuntimeError, r"rank 1 called another collective"
        ):
            CallFence(comm, 30.0).agree("model.fit")

    def test_lone_call_names_live_and_exited_peers(self):
        comm = _FakeCommunicator([], size=3, error=_timeout())
        fence = CallFence(comm, 30.0, watchdog=_FakeWatchdog([2]))
        with self.assertRaisesRegex(
            RuntimeError,
            r"model.predict is a collective, but not every worker called "
            r"it: rank 0 called model.predict, rank 1 did not call it "
            r"within 30 s, rank 2 has exited\. Call model.predict on every "
            r"worker",
        ) as raised:
            fence.agree("model.predict")
        self.assertIsNone(raised.exception.__cause__)

    def test_aborted_collectives_are_named_as_such(self):
        error = _timeout("Collective ops is aborted by: timed out")
        comm = _FakeCommunicator([], error=error)
        with self.assertRaisesRegex(
            RuntimeError, r"rank 1 is unknown: this worker's collectives"
        ):
            CallFence(comm, 30.0).agree("save_checkpoint")

    def test_nested_calls_fence_once(self):
        comm = _FakeCommunicator([("model.save", 1)])
        fence = CallFence(comm, 30.0)
        with fence.fenced("model.save"):
            with fence.fenced("model.get_weights"):
                with fence.fenced("variable.numpy"):
                    pass
        self.assertEqual(comm.gathered, 1)
        comm.peers = [("model.fit", 2)]
        with fence.fenced("model.fit"):
            pass
        self.assertEqual(comm.gathered, 2)

    def test_one_worker_never_communicates(self):
        comm = _FakeCommunicator([], size=1, error=_timeout())
        with CallFence(comm, 30.0).fenced("model.fit"):
            pass
        self.assertEqual(comm.gathered, 0)

    def test_a_read_failing_in_a_joiners_fit_is_explained(self):
        # An elastic joiner enters `fit` as one worker (no agreement) and
        # is admitted inside it: a read there that times out is explained
        # like any other (it raised AttributeError: no `outer`).
        comm = _FakeCommunicator([], size=1)
        fence = CallFence(comm, 30.0)
        with self.assertRaisesRegex(RuntimeError, "inside model.fit"):
            with fence.fenced("model.fit"):
                comm.size = 2  # admitted
                with fence.fenced("model.get_weights"):
                    raise _timeout()
        self.assertEqual(comm.gathered, 0)

    def test_a_lost_peer_in_a_read_inside_fit_stays_what_it_is(self):
        # Not a rank-0-only read: an elastic job recovers from it.
        comm = _FakeCommunicator([("model.fit", 1)])
        fence = CallFence(comm, 30.0)
        lost = tf.errors.UnavailableError(None, None, "connection refused")
        with self.assertRaises(tf.errors.UnavailableError):
            with fence.fenced("model.fit"):
                with fence.fenced("model.get_weights"):
                    raise lost

    def test_unknown_call_name(self):
        fence = CallFence(_FakeCommunicator([]), 30.0)
        with self.assertRaisesRegex(ValueError, r"`name` must be one of"):
            with fence.fenced("model.compile"):
                pass

    def test_fenced_does_nothing_without_an_installed_fence(self):
        self.assertIsNone(call_fence.active())
        with call_fence.fenced("model.fit"):
            pass


class _Strategy:
    """What the `collective_calls` patches read of a strategy."""

    engine = "horovod"  # no watchdog

    def __init__(self, communicator):
        self.communicator = communicator
        communicator.timeout_seconds = 30.0


class FencedCallsTest(TestCase):
    def test_install_and_uninstall_restore_keras(self):
        names = ("fit", "evaluate", "predict", "predict_on_batch")
        before = {n: keras.Model.__dict__.get(n) for n in names}
        get_weights = keras.layers.Layer.get_weights
        strategy = _Strategy(_FakeCommunicator([]))
        with registry.installing(strategy, collective_calls.PATCHES):
            self.assertIsNotNone(call_fence.active())
            for n in names:
                self.assertIsNot(getattr(keras.Model, n), before[n])
            self.assertIsNot(keras.layers.Layer.get_weights, get_weights)
        self.assertIsNone(call_fence.active())
        for n in names:
            self.assertIs(keras.Model.__dict__.get(n), before[n])
        self.assertIs(keras.layers.Layer.get_weights, get_weights)

    def test_models_outside_a_strategy_are_not_fenced(self):
        comm = _FakeCommunicator([], error=_timeout())
        with registry.installing(_Strategy(comm), collective_calls.PATCHES):
            model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
            model.compile(optimizer="sgd", loss="mse")
            x = np.ones((4, 2), "float32")
            # Each worker trains its own copy: said once per model.
            with self.assertLogs("absl", "WARNING") as logs:
                model.fit(x, x[:, :1], verbose=0)
                model.fit(x, x[:, :1], verbose=0)
            (warning,) = logs.output
            self.assertIn("built outside `strategy.scope()`", warning)
            model.predict(x, verbose=0)
            model.get_weights()
        self.assertEqual(comm.gathered, 0)


class _Rank:
    """What `chief_summaries` reads of a strategy of 2 workers."""

    size = 2

    def __init__(self, rank):
        self.is_chief = rank == 0


class ChiefSummariesTest(TestCase):
    def _fit(self, log_dir):
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        x = np.ones((8, 2), "float32")
        model.fit(
            x,
            x[:, :1],
            epochs=2,
            verbose=0,
            callbacks=[keras.callbacks.TensorBoard(log_dir)],
        )

    def test_other_ranks_write_no_event_file(self):
        log_dir = tempfile.mkdtemp(prefix="tb_other_")
        with registry.installing(_Rank(1), chief_summaries.PATCHES):
            self._fit(log_dir)
        self.assertEqual(os.listdir(log_dir), [])
        self._fit(log_dir)  # uninstalled: writes again
        self.assertEqual(os.listdir(log_dir), ["train"])

    def test_the_chief_writes_as_before(self):
        log_dir = tempfile.mkdtemp(prefix="tb_chief_")
        with registry.installing(_Rank(0), chief_summaries.PATCHES):
            self._fit(log_dir)
        self.assertEqual(os.listdir(log_dir), ["train"])

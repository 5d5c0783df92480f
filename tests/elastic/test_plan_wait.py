"""How long survivors wait for the launcher's recovery plan."""

import os
from unittest import mock

import tensorflow as tf

from keras_hybrid.contract.elastic_board import DISCOVERY_WAIT_ENV
from keras_hybrid.elastic.buddy_sender import BuddyCopyError
from keras_hybrid.elastic.plan_wait import PLAN_WAIT_SECONDS
from keras_hybrid.elastic.plan_wait import plan_wait_seconds
from keras_hybrid.launch.elastic.task_env import ElasticSettings
from keras_hybrid.launch.elastic.task_env import task_envs
from keras_hybrid.testing import TestCase


def _fenced(error):
    # What the call fence raises for a read in a callback that failed.
    try:
        raise RuntimeError("model.get_weights failed on rank 0") from error
    except RuntimeError as wrapped:
        return wrapped


class PlanWaitTest(TestCase):
    def test_a_lost_peer_waits_as_long_as_the_launcher_may(self):
        lost = tf.errors.UnavailableError(None, None, "connection refused")
        with mock.patch.dict(os.environ, {DISCOVERY_WAIT_ENV: "60.0"}):
            self.assertEqual(plan_wait_seconds(lost), PLAN_WAIT_SECONDS + 60)
            # Behind the fence's RuntimeError too (it was not waited for).
            self.assertEqual(
                plan_wait_seconds(_fenced(lost)), PLAN_WAIT_SECONDS + 60
            )
            timeout = tf.errors.DeadlineExceededError(None, None, "timed out")
            self.assertEqual(plan_wait_seconds(timeout), PLAN_WAIT_SECONDS + 60)

    def test_a_broken_link_to_a_peer_waits_like_a_lost_peer(self):
        # The buddy store's sender, sending to a peer that just died (as
        # `fit` re-raises it: Keras' traceback filter drops `__cause__`).
        sent = BuddyCopyError("could not send its buddy copy to task 1")
        refused = ConnectionRefusedError(111, "Connection refused")
        try:
            raise RuntimeError("a fenced read failed") from refused
        except RuntimeError as error:
            fenced = error
        with mock.patch.dict(os.environ, {DISCOVERY_WAIT_ENV: "60.0"}):
            self.assertEqual(plan_wait_seconds(sent), PLAN_WAIT_SECONDS + 60)
            self.assertEqual(plan_wait_seconds(fenced), PLAN_WAIT_SECONDS + 60)
            reset = ConnectionResetError(104, "Connection reset by peer")
            self.assertEqual(plan_wait_seconds(reset), PLAN_WAIT_SECONDS + 60)
            self.assertEqual(plan_wait_seconds(OSError("disk full")), 0.0)

    def test_the_scripts_own_errors_wait_less_or_not_at_all(self):
        with mock.patch.dict(os.environ, {DISCOVERY_WAIT_ENV: "60.0"}):
            bad = tf.errors.InvalidArgumentError(None, None, "bad index")
            self.assertEqual(plan_wait_seconds(bad), PLAN_WAIT_SECONDS)
            self.assertEqual(plan_wait_seconds(ValueError("x")), 0.0)

    def test_the_launcher_passes_its_elastic_timeout_on(self):
        settings = ElasticSettings(
            "/tmp/plans", 2, 3, 10, {}, None, None,
            discovery_wait_seconds=42.5,
        )  # fmt: skip
        envs, _ = task_envs({0: "localhost"}, settings, [1, 2, 3])
        self.assertTrue(all(e[DISCOVERY_WAIT_ENV] == "42.5" for e in envs))

"""Which engine `HybridStrategy` picks, and the errors of the Horovod
engine that need no Horovod to show."""

import os
import sys
from unittest import mock

import tensorflow as tf

from keras_hybrid import HybridStrategy
from keras_hybrid.comm import horovod_communicator
from keras_hybrid.testing import OneProcessTestCase
from keras_hybrid.testing import multiprocess

# Set in every worker `horovodrun` starts.
HOROVODRUN_ENV = {"HOROVOD_RANK": "0", "HOROVOD_SIZE": "1"}


def _without_horovod():
    """Makes `import horovod.tensorflow` fail, even where it is installed."""
    return mock.patch.dict(
        sys.modules, {"horovod": None, "horovod.tensorflow": None}
    )


class HorovodEngineChoiceTest(OneProcessTestCase):
    def test_missing_horovod_names_the_build_command_and_matrix(self):
        with _without_horovod():
            with self.assertRaises(ImportError) as raised:
                HybridStrategy(engine="horovod")
        message = str(raised.exception)
        self.assertIn(horovod_communicator.BUILD_COMMAND, message)
        self.assertIn("tensorflow-cpu==2.15.1", message)
        self.assertIn("engine='tf'", message)

    def test_keras_hybrid_engine_horovod_chooses_horovod(self):
        os.environ["KERAS_HYBRID_ENGINE"] = "horovod"
        with _without_horovod():
            with self.assertRaisesRegex(ImportError, "HOROVOD_WITH_GLOO"):
                HybridStrategy()

    def test_horovodrun_environment_chooses_horovod(self):
        os.environ.update(HOROVODRUN_ENV)
        with _without_horovod():
            with self.assertRaisesRegex(ImportError, "HOROVOD_WITH_GLOO"):
                HybridStrategy()

    def test_named_tf_engine_wins_over_horovodrun_environment(self):
        os.environ.update(HOROVODRUN_ENV)
        with _without_horovod():
            self.assertEqual(HybridStrategy(engine="tf").engine, "tf")

    def test_horovod_with_a_cluster_resolver_is_refused(self):
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
            tf.train.ClusterSpec({"worker": ["127.0.0.1:1"]}),
            task_type="worker",
            task_id=0,
        )
        with self.assertRaisesRegex(ValueError, "cluster comes from"):
            HybridStrategy(cluster_resolver=resolver, engine="horovod")

    def test_horovod_test_engines_are_checked(self):
        os.environ[multiprocess.TEST_ENGINES_ENV] = "tf,mpi"
        with self.assertRaisesRegex(ValueError, "'tf,mpi'"):
            multiprocess.engines_under_test()
        os.environ[multiprocess.TEST_ENGINES_ENV] = "horovod, tf"
        self.assertEqual(multiprocess.engines_under_test(), ["horovod", "tf"])

    def test_horovod_is_a_launcher_of_run_workers(self):
        with self.assertRaisesRegex(ValueError, "engine='mpi'"):
            multiprocess.run_workers("w.py", 2, "/tmp", engine="mpi")

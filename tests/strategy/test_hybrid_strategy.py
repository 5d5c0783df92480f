"""HybridStrategy in one process: arguments, errors and the plain path."""

import logging
import os
import sys
from unittest import mock

import keras
import numpy as np
import tensorflow as tf

from keras_hybrid import HybridStrategy
from keras_hybrid.strategy import cluster
from keras_hybrid.strategy import quiet_ranks
from keras_hybrid.testing import OneProcessTestCase
from keras_hybrid.testing import TestCase
from keras_hybrid.testing import models

_Resolver = tf.distribute.cluster_resolver.SimpleClusterResolver


class HybridStrategyArgsTest(OneProcessTestCase):
    def test_unknown_engine(self):
        with self.assertRaisesRegex(ValueError, r"`engine` must be one of"):
            HybridStrategy(engine="nccl")

    def test_environment_overrides_engine(self):
        os.environ["KERAS_HYBRID_ENGINE"] = "bogus"
        with self.assertRaisesRegex(ValueError, "KERAS_HYBRID_ENGINE"):
            HybridStrategy(engine="tf")

    def test_horovod_engine_without_horovod_gives_the_build_command(self):
        # Hidden even where it is installed (`make test-horovod`).
        hidden = {"horovod": None, "horovod.tensorflow": None}
        with mock.patch.dict(sys.modules, hidden):
            with self.assertRaisesRegex(ImportError, "HOROVOD_WITH_GLOO=1"):
                HybridStrategy(engine="horovod")

    def test_timeout_must_be_positive(self):
        with self.assertRaisesRegex(ValueError, "timeout_seconds"):
            HybridStrategy(timeout_seconds=0)
        with self.assertRaisesRegex(TypeError, "timeout_seconds"):
            HybridStrategy(timeout_seconds="10")

    def test_bucket_bytes_must_be_positive(self):
        with self.assertRaisesRegex(ValueError, "bucket_bytes"):
            HybridStrategy(bucket_bytes=-1)

    def test_unknown_indexed_slices(self):
        with self.assertRaisesRegex(
            ValueError, "`indexed_slices` must be one of.*'sum'"
        ):
            HybridStrategy(indexed_slices="sum")

    def test_hierarchical_must_be_bool_or_none(self):
        with self.assertRaisesRegex(TypeError, "`hierarchical` must be"):
            HybridStrategy(hierarchical="auto")

    def test_one_process_is_flat(self):
        with mock.patch.dict(os.environ):
            os.environ.pop("TF_CONFIG", None)
            strategy = HybridStrategy(hierarchical=True)
        self.assertIsNone(strategy.communicator.hosts)
        self.assertFalse(strategy.communicator.hierarchical)

    def test_cluster_resolver_type(self):
        with self.assertRaisesRegex(TypeError, "ClusterResolver"):
            HybridStrategy(cluster_resolver={"worker": ["a:1"]})

    def test_cluster_must_be_one_worker_job(self):
        spec = tf.train.ClusterSpec(
            {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]}
        )
        resolver = _Resolver(spec, task_type="worker", task_id=0)
        with self.assertRaisesRegex(ValueError, "one job of identical"):
            HybridStrategy(cluster_resolver=resolver)

    def test_task_index_in_range(self):
        spec = tf.train.ClusterSpec({"worker": ["127.0.0.1:1"]})
        resolver = _Resolver(spec, task_type="worker", task_id=3)
        with self.assertRaisesRegex(ValueError, r"task index must be in"):
            HybridStrategy(cluster_resolver=resolver)

    def test_a_worker_that_ran_tensorflow_first_is_told_to_create_it_first(
        self,
    ):
        # TensorFlow only said "Collective ops must be configured at
        # program startup" for a script that loads its data first.
        tf.constant(1.0)  # this process's eager context has started
        spec = tf.train.ClusterSpec({"worker": ["127.0.0.1:1", "127.0.0.1:2"]})
        resolver = _Resolver(spec, task_type="worker", task_id=1)
        with mock.patch.object(cluster, "_joined", None):
            with self.assertRaisesRegex(
                RuntimeError, r"before this process runs any TensorFlow op"
            ):
                HybridStrategy(cluster_resolver=resolver)


class SingleProcessTest(TestCase):
    def test_no_cluster_is_plain_training(self):
        with mock.patch.dict(os.environ):
            os.environ.pop("TF_CONFIG", None)
            strategy = HybridStrategy()
        self.assertEqual(
            (strategy.rank, strategy.size, strategy.is_chief), (0, 1, True)
        )
        self.assertEqual(strategy.num_replicas_in_sync, 1)
        x, y = models.make_data(96)
        with strategy.scope():
            model = models.build_model("functional", seed=7)
            models.compile_model(model, "adam")
        history = model.fit(x, y, batch_size=32, epochs=2, verbose=0)

        keras.backend.clear_session()
        plain = models.build_model("functional", seed=7)
        models.compile_model(plain, "adam")
        expected = plain.fit(x, y, batch_size=32, epochs=2, verbose=0)
        for a, b in zip(model.get_weights(), plain.get_weights(), strict=True):
            self.assertAllClose(a, b)
        self.assertAllClose(history.history["loss"], expected.history["loss"])
        predictions = model.predict(x, batch_size=32, verbose=0)
        self.assertAllClose(predictions, plain.predict(x, verbose=0))
        self.assertEqual(
            strategy.communicator.stats.snapshot()["dense"]["bytes"], 0
        )

    def test_a_model_built_outside_the_scope_is_refused_by_name(self):
        # Its optimizer failed with "'Adam' object has no attribute
        # '_momentums'"; stock strategies refuse such a model too.
        with mock.patch.dict(os.environ):
            os.environ.pop("TF_CONFIG", None)
            strategy = HybridStrategy()
        x, y = models.make_data(64)
        outside = models.build_model("functional", seed=7)
        with strategy.scope():
            model = keras.Model(
                outside.inputs, keras.layers.Dense(1)(outside.outputs[0])
            )
            model.compile(optimizer="adam", loss="mse")
        with self.assertRaisesRegex(
            ValueError, r"cannot train .* created outside `strategy.scope"
        ) as raised:
            model.fit(x, y, batch_size=32, epochs=1, verbose=0)
        for variable in outside.trainable_variables:
            self.assertIn(variable.path, str(raised.exception))
        self.assertNotIn(model.layers[-1].kernel.path, str(raised.exception))

    def test_batches_read_ahead_are_trained_on_as_in_plain_keras(self):
        # Keras' TF trainer builds a model under any strategy from a batch
        # of a fresh iterator: batches a PyDataset's threads or a generator
        # had read ahead for it were lost, on one process too.
        x, y = models.make_data(480)

        class Batches(keras.utils.PyDataset):
            def __len__(self):
                return 10

            def __getitem__(self, i):
                return x[48 * i : 48 * (i + 1)], y[48 * i : 48 * (i + 1)]

        def generator():
            while True:
                for i in range(10):
                    yield x[48 * i : 48 * (i + 1)], y[48 * i : 48 * (i + 1)]

        def train(strategy, data, **kwargs):
            keras.backend.clear_session()
            scope = strategy.scope() if strategy else mock.MagicMock()
            with scope:
                model = models.build_model("functional", seed=7)
                models.compile_model(model, "sgd")
            model.fit(data(), epochs=2, verbose=0, **kwargs)
            if strategy:
                strategy.close()
            return model.get_weights()

        with mock.patch.dict(os.environ):
            os.environ.pop("TF_CONFIG", None)
            for data, kwargs in [
                (lambda: Batches(workers=2), {"shuffle": False}),
                (generator, {"steps_per_epoch": 8}),
            ]:
                plain = train(None, data, **kwargs)
                ours = train(HybridStrategy(), data, **kwargs)
                for a, b in zip(ours, plain, strict=True):
                    self.assertAllClose(a, b)

    def test_variable_kinds_key_matching_nothing_is_reported(self):
        with mock.patch.dict(os.environ):
            os.environ.pop("TF_CONFIG", None)
            strategy = HybridStrategy(
                variable_kinds={"embedding/embeddings": "dense"}
            )
        with strategy.scope():
            ids = keras.Input((3,), dtype="int32")
            x = keras.layers.Embedding(20, 4, name="items")(ids)
            x = keras.layers.GlobalAveragePooling1D()(x)
            model = keras.Model(ids, keras.layers.Dense(1)(x))
            model.compile(optimizer="sgd", loss="mse")
        with self.assertLogs("absl", level="WARNING") as logs:
            model.fit(np.zeros((4, 3)), np.zeros((4, 1)), verbose=0)
        message = "\n".join(logs.output)
        self.assertIn("'embedding/embeddings'", message)
        self.assertIn("items/embeddings", message)

    def test_paths_are_unique_and_are_the_override_keys(self):
        class TwoSameNames(keras.Model):
            def __init__(self):
                super().__init__(name="twins")
                self.a = keras.layers.Embedding(50, 4, name="emb")
                self.b = keras.layers.Embedding(50, 4, name="emb")

            def call(self, x):
                return self.a(x) + self.b(x)

        with mock.patch.dict(os.environ):
            os.environ.pop("TF_CONFIG", None)
            strategy = HybridStrategy(
                variable_kinds={"twins/emb/embeddings#2": "sparse"}
            )
        with strategy.scope():
            model = TwoSameNames()
            model(np.zeros((2, 3), "int32"))
        plan = strategy.plan
        self.assertEqual(
            [v.path for v in plan.variables],
            ["twins/emb/embeddings", "twins/emb/embeddings#2"],
        )
        self.assertEqual(plan["twins/emb/embeddings"].kind, "dense")
        self.assertEqual(plan["twins/emb/embeddings#2"].kind, "sparse")
        self.assertEqual(plan["twins/emb/embeddings#2"].source, "override")

    def test_link_must_be_a_link(self):
        with self.assertRaisesRegex(TypeError, "keras_hybrid.Link"):
            HybridStrategy(link="10gbit")

    def test_gather_predictions_is_a_deprecated_no_op(self):
        strategy = HybridStrategy()
        predictions = np.arange(4.0).reshape(4, 1)
        with self.assertLogs("absl", level="WARNING") as logs:
            same = strategy.gather_predictions(predictions, 2)
        self.assertIs(same, predictions)
        self.assertIn("deprecated", "\n".join(logs.output))


class QuietRanksTest(TestCase):
    def test_drops_only_keras_console_records(self):
        keep = logging.LogRecord("absl", 20, "/x/train.py", 1, "m", (), None)
        drop = logging.LogRecord(
            "absl", 20, "/k/keras/src/utils/io_utils.py", 1, "bar", (), None
        )
        self.assertTrue(quiet_ranks._FILTER.filter(keep))
        self.assertFalse(quiet_ranks._FILTER.filter(drop))

"""DynamicEmbedding's arguments, inputs and reads outside training."""

import tempfile

import keras
import numpy as np
import tensorflow as tf

import keras_hybrid
from keras_hybrid.dynamic.initial_rows import InitialRows
from keras_hybrid.layers import DynamicEmbedding
from keras_hybrid.testing.test_case import TestCase


class BadInputTest(TestCase):
    def test_float_keys_are_refused_at_the_first_call(self):
        with self.assertRaisesRegex(TypeError, "integer or string keys"):
            DynamicEmbedding(2, capacity=4)(keras.Input((3,), dtype="float32"))

    def test_ragged_and_sparse_keys_are_refused(self):
        layer = DynamicEmbedding(2, capacity=4)
        with self.assertRaisesRegex(TypeError, "dense keys.*RaggedTensor"):
            layer(tf.ragged.constant([[1], [2, 3]], dtype=tf.int64))
        with self.assertRaisesRegex(TypeError, "dense keys.*SparseTensor"):
            layer(tf.sparse.from_dense(tf.constant([[1, 0]], tf.int64)))

    def test_keys_of_another_dtype_than_the_first_are_refused(self):
        layer = DynamicEmbedding(2, capacity=4)
        layer(np.array([[1]], np.int64))
        with self.assertRaisesRegex(TypeError, "built for int64 keys"):
            layer(tf.constant([["a"]]))

    def test_bad_arguments(self):
        with self.assertRaisesRegex(ValueError, "`capacity` must be an int"):
            DynamicEmbedding(2, capacity=0)
        with self.assertRaisesRegex(TypeError, "`capacity` must be an int"):
            DynamicEmbedding(2, capacity=2.5)
        with self.assertRaisesRegex(ValueError, "`admit_after` must be"):
            DynamicEmbedding(2, capacity=2, admit_after=0)
        with self.assertRaisesRegex(ValueError, "`eviction` must be None"):
            DynamicEmbedding(2, capacity=2, eviction="fifo")
        with self.assertRaisesRegex(ValueError, "ttl:<steps>"):
            DynamicEmbedding(2, capacity=2, eviction="ttl:0")
        with self.assertRaisesRegex(NotImplementedError, "GlorotUniform"):
            DynamicEmbedding(
                2, capacity=2, embeddings_initializer="glorot_uniform"
            )

    def test_another_strategy_is_refused(self):
        strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
        with strategy.scope():
            with self.assertRaisesRegex(
                NotImplementedError,
                "under keras_hybrid.HybridStrategy. Received: a layer built "
                "under OneDeviceStrategy",
            ):
                DynamicEmbedding(2, capacity=4)(np.array([[1]]))

    def test_an_optimizer_that_mixes_rows_is_refused(self):
        keys = keras.Input(shape=(1,), dtype="int64")
        layer = DynamicEmbedding(2, capacity=4)
        model = keras.Model(keys, keras.ops.sum(layer(keys), axis=(1, 2)))
        model.compile(optimizer=keras.optimizers.Adafactor(), loss="mse")
        with self.assertRaisesRegex(ValueError, "`Adafactor` cannot update"):
            model.fit(np.array([[1]]), np.ones(1), verbose=0)


class ReadTest(TestCase):
    def test_unseen_keys_read_the_default_row_at_predict(self):
        keys = keras.Input(shape=(2,), dtype="int64")
        layer = DynamicEmbedding(3, capacity=4, default_value=0.5)
        model = keras.Model(keys, layer(keys))
        model.compile(optimizer="sgd", loss="mse")
        model.fit(np.array([[1, 2]]), np.zeros((1, 2, 3)), verbose=0)
        out = model.predict(np.array([[1, 99]]), verbose=0)
        np.testing.assert_array_equal(out[0, 1], [0.5, 0.5, 0.5])
        self.assertNotEqual(out[0, 0, 0], 0.5)
        # Reads admit nothing.
        self.assertEqual(sorted(layer.live_keys()[0].tolist()), [1, 2])

    def test_string_keys_train(self):
        keys = keras.Input(shape=(2,), dtype="string")
        layer = DynamicEmbedding(3, capacity=8, admit_after=1)
        model = keras.Model(keys, keras.ops.sum(layer(keys), axis=(1, 2)))
        model.compile(optimizer="adam", loss="mse")
        data = tf.data.Dataset.from_tensor_slices(
            (tf.constant([["a", "b"], ["b", "c"]]), tf.ones(2))
        ).batch(1)
        model.fit(data, verbose=0)
        self.assertEqual(
            sorted(layer.live_keys()[0].tolist()), [b"a", b"b", b"c"]
        )

    def test_mask_zero(self):
        layer = DynamicEmbedding(2, capacity=4, mask_zero=True)
        mask = layer.compute_mask(np.array([[0, 3]]))
        np.testing.assert_array_equal(mask, [[False, True]])


class InitialRowsTest(TestCase):
    def test_a_row_depends_on_its_key_and_seed_only(self):
        keys = np.array([5, -(2**63), 2**63 - 1, 0], np.int64)
        rows = InitialRows("uniform")(keys, 8).numpy()
        reversed_rows = InitialRows("uniform")(keys[::-1], 8).numpy()
        np.testing.assert_array_equal(rows, reversed_rows[::-1])
        self.assertTrue((np.abs(rows) <= 0.05).all())
        self.assertFalse(np.array_equal(rows[0], rows[1]))
        other_seed = InitialRows("uniform", seed=1)(keys, 8).numpy()
        self.assertFalse(np.array_equal(rows, other_seed))
        # Two layers, other capacities and arrival orders: the same rows.
        first = DynamicEmbedding(8, capacity=4)
        second = DynamicEmbedding(8, capacity=9)
        first(keys[None, :], training=True)
        second(keys[None, ::-1], training=True)
        for layer in (first, second):
            live, at = layer.live_keys()
            want = InitialRows("uniform")(live, 8).numpy()
            np.testing.assert_array_equal(layer.embeddings.numpy()[at], want)

    def test_normal_draws_have_the_asked_moments(self):
        keys = np.arange(2000, dtype=np.int64)
        init = keras.initializers.RandomNormal(mean=1.0, stddev=2.0)
        rows = InitialRows(init)(keys, 16).numpy()
        self.assertAlmostEqual(rows.mean(), 1.0, delta=0.05)
        self.assertAlmostEqual(rows.std(), 2.0, delta=0.05)
        truncated = InitialRows("truncated_normal")(keys, 16).numpy()
        self.assertLessEqual(np.abs(truncated).max(), 2 * 0.05 + 1e-7)


class DocumentedErrorsTest(TestCase):
    def test_eviction_must_be_a_string(self):
        with self.assertRaisesRegex(TypeError, "`eviction` must be a string"):
            DynamicEmbedding(2, capacity=2, eviction=3)

    def test_build_needs_the_key_dtype(self):
        with self.assertRaisesRegex(ValueError, "before it knows its key"):
            DynamicEmbedding(2, capacity=2).build((None, 1))

    def test_an_empty_table_has_no_static_equivalent(self):
        layer = DynamicEmbedding(2, capacity=2, key_dtype="int64")
        layer.build((None, 1))
        with self.assertRaisesRegex(ValueError, "holds no key yet"):
            layer.static_equivalent()

    def test_to_static_refuses_a_subclassed_model(self):
        from keras_hybrid.layers import to_static

        class Subclassed(keras.Model):
            def call(self, x):
                return x

        with self.assertRaisesRegex(NotImplementedError, "Functional"):
            to_static(Subclassed())

    def test_variable_length_keys(self):
        keys = keras.Input(shape=(None,), dtype="string")
        x = DynamicEmbedding(3, capacity=8)(keys)
        self.assertEqual(tuple(x.shape), (None, None, 3))
        model = keras.Model(keys, keras.layers.GlobalAveragePooling1D()(x))
        model.compile(optimizer="adam", loss="mse")
        data = tf.data.Dataset.from_tensor_slices(
            (tf.constant([["a", "b", "c"], ["d", "a", "e"]]), tf.ones((2, 3)))
        ).batch(1)
        model.fit(data, verbose=0)


class SparseGradientTest(TestCase):
    def test_the_table_gradient_stays_sparse(self):
        # A gather, so optimizers get an IndexedSlices, as for Embedding.
        layer = DynamicEmbedding(4, capacity=1000)
        keys = np.array([[3, 5, 3]], np.int64)
        layer(keys, training=True)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(keys, training=True))
        (grad,) = tape.gradient(loss, layer.trainable_variables)
        self.assertIsInstance(grad, tf.IndexedSlices)
        self.assertEqual(grad.values.shape[0], 3)


class ShardedCheckpointTest(TestCase):
    def test_string_keys_are_refused(self):
        keys = keras.Input(shape=(1,), dtype="string")
        layer = DynamicEmbedding(2, capacity=4)
        model = keras.Model(keys, keras.ops.sum(layer(keys), axis=(1, 2)))
        model.compile(optimizer="sgd", loss="mse")
        callback = keras_hybrid.callbacks.ShardedCheckpoint(
            tempfile.mkdtemp(prefix="dynamic_ckpt_")
        )
        with self.assertRaisesRegex(
            NotImplementedError, "sharded checkpoint holds integer keys only"
        ):
            data = tf.data.Dataset.from_tensor_slices(
                (tf.constant([["a"]]), tf.ones([1]))
            )
            model.fit(data.batch(1), callbacks=[callback], verbose=0)

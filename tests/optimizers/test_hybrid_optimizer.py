"""`HybridOptimizer` in one process: API, checks, and exact semantics.

References say their sparse semantics: tables are updated with the
deduplicated (dense) gradient, which is what the hybrid path applies.
"""

import keras
import numpy as np
import tensorflow as tf

import keras_hybrid
from keras_hybrid.testing import SPARSE_TABLES
from keras_hybrid.testing import TestCase

V, D = 300, 4


def embedding_model():
    return keras.Sequential(
        [
            keras.Input((6,), dtype="int32"),
            keras.layers.Embedding(V, D),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(3),
        ]
    )


def data(n=48):
    rng = np.random.default_rng(3)
    # Few distinct ids, so batches repeat ids (duplicates matter for Adam).
    x = rng.integers(0, 40, size=(n, 6)).astype("int32")
    y = rng.integers(0, 3, size=(n,))
    return x, y


LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def dense_semantics_reference(weights, optimizer, steps, batch=16):
    """Plain Keras, no strategy; IndexedSlices gradients are densified
    (ids summed before the optimizer), i.e. dense-gradient semantics."""
    keras.backend.clear_session()
    model = embedding_model()
    model.set_weights(weights)
    x, y = data()
    for step in range(steps):
        xb = x[step * batch : (step + 1) * batch]
        yb = y[step * batch : (step + 1) * batch]
        with tf.GradientTape() as tape:
            loss = LOSS(yb, model(xb))
        grads = tape.gradient(loss, model.trainable_variables)
        grads = [tf.convert_to_tensor(g) for g in grads]
        optimizer.apply(grads, model.trainable_variables)
    return model.get_weights()


class HybridOptimizerApiTest(TestCase):
    def test_rejects_bad_arguments(self):
        with self.assertRaisesRegex(TypeError, "must be a `keras.optimizers"):
            keras_hybrid.HybridOptimizer("adam")
        wrapped = keras_hybrid.HybridOptimizer(keras.optimizers.SGD())
        with self.assertRaisesRegex(TypeError, "already a HybridOptimizer"):
            keras_hybrid.HybridOptimizer(wrapped)
        with self.assertRaisesRegex(ValueError, "sparse_gradients=.avg."):
            keras_hybrid.HybridOptimizer(
                keras.optimizers.SGD(), sparse_gradients="avg"
            )
        built = keras.optimizers.SGD()
        built.build([keras.Variable(np.zeros(2))])
        with self.assertRaisesRegex(ValueError, "must not be built"):
            keras_hybrid.HybridOptimizer(built)

    def test_config_round_trip_keeps_inner_and_accumulation(self):
        opt = keras_hybrid.HybridOptimizer(
            keras.optimizers.Adam(0.003, gradient_accumulation_steps=3),
            sparse_gradients="sum",
            name="hyb",
        )
        config = opt.get_config()
        clone = keras_hybrid.HybridOptimizer.from_config(config)
        self.assertEqual(clone.name, "hyb")
        self.assertEqual(clone.sparse_gradients, "sum")
        self.assertIsInstance(clone.inner_optimizer, keras.optimizers.Adam)
        self.assertEqual(clone.inner_optimizer.gradient_accumulation_steps, 3)
        self.assertAllClose(clone.learning_rate, 0.003)

    def test_learning_rate_callbacks_reach_the_inner_optimizer(self):
        strategy = keras_hybrid.HybridStrategy(variable_kinds=SPARSE_TABLES)
        with strategy.scope():
            model = embedding_model()
            opt = keras_hybrid.HybridOptimizer(keras.optimizers.SGD(0.5))
            model.compile(optimizer=opt, loss=LOSS)
        x, y = data()
        schedule = keras.callbacks.LearningRateScheduler(
            lambda epoch, lr: 0.25 / (epoch + 1)
        )
        plateau = keras.callbacks.ReduceLROnPlateau(
            monitor="loss", factor=0.5, patience=0, min_delta=1e9
        )
        model.fit(
            x,
            y,
            epochs=2,
            batch_size=16,
            verbose=0,
            callbacks=[schedule, plateau],
        )
        # Epoch 2: the scheduler set 0.125, the plateau callback halved it.
        self.assertAllClose(opt.inner_optimizer.learning_rate, 0.0625)
        self.assertIs(model.optimizer.inner_optimizer, opt.inner_optimizer)


class HybridOptimizerSemanticsTest(TestCase):
    def _train_hybrid(self, make_optimizer, steps, batch=16):
        strategy = keras_hybrid.HybridStrategy(variable_kinds=SPARSE_TABLES)
        with strategy.scope():
            model = embedding_model()
            model.compile(optimizer=make_optimizer(), loss=LOSS)
        self.assertEqual(
            strategy.plan["sequential/embedding/embeddings"].kind, "sparse"
        )
        weights = model.get_weights()
        x, y = data()
        n = steps * batch
        model.fit(x[:n], y[:n], batch_size=batch, shuffle=False, verbose=0)
        return weights, model.get_weights()

    def test_adam_matches_dense_semantics_reference(self):
        start, got = self._train_hybrid(lambda: keras.optimizers.Adam(0.05), 3)
        want = dense_semantics_reference(start, keras.optimizers.Adam(0.05), 3)
        for g, w in zip(got, want, strict=True):
            self.assertAllClose(g, w)
        self.assertGreater(np.abs(got[0] - start[0]).max(), 1e-3)

    def test_accumulation_matches_keras_accumulation(self):
        def adam():
            return keras.optimizers.Adam(0.05, gradient_accumulation_steps=2)

        start, got = self._train_hybrid(
            lambda: keras_hybrid.HybridOptimizer(adam()), 3
        )
        # Keras' own accumulation densifies table gradients (dense
        # semantics), like the hybrid path.
        want = dense_semantics_reference(start, adam(), 3)
        for g, w in zip(got, want, strict=True):
            self.assertAllClose(g, w)

    def test_accumulating_a_sparse_gradient_touches_only_its_rows(self):
        # A table's pushed gradient is added row by row: no tensor of the
        # table's shape is made (a whole-table pass on every step).
        inner = keras.optimizers.SGD(0.1, gradient_accumulation_steps=2)
        opt = keras_hybrid.HybridOptimizer(inner)
        acc = keras.Variable(np.zeros((V, D), "float32"))
        grad = tf.IndexedSlices(
            tf.ones((3, D)),
            tf.constant([1, 5, 1], tf.int64),
            tf.constant([V, D], tf.int64),
        )

        @tf.function
        def accumulate():
            opt._accumulate([grad], [acc])

        graph = accumulate.get_concrete_function().graph
        shapes = {
            tuple(out.shape)
            for op in graph.get_operations()
            for out in op.outputs
        }
        self.assertNotIn((V, D), shapes)
        accumulate()
        accumulate()
        want = np.zeros((V, D), "float32")
        want[1], want[5] = 4.0, 2.0
        self.assertAllClose(acc.numpy(), want)

    def test_custom_training_loop_with_apply(self):
        strategy = keras_hybrid.HybridStrategy(variable_kinds=SPARSE_TABLES)
        with strategy.scope():
            model = embedding_model()
            opt = keras_hybrid.HybridOptimizer(keras.optimizers.SGD(0.5))
        start = model.get_weights()
        x, y = data()
        x, y = x[:16], y[:16]

        @tf.function
        def step(xb, yb):
            def replica_step(xb, yb):
                with tf.GradientTape() as tape:
                    loss = LOSS(yb, model(xb))
                grads = tape.gradient(loss, model.trainable_variables)
                opt.apply(grads, model.trainable_variables)

            strategy.run(replica_step, args=(xb, yb))

        step(x, y)
        want = dense_semantics_reference(start, keras.optimizers.SGD(0.5), 1)
        for g, w in zip(model.get_weights(), want, strict=True):
            self.assertAllClose(g, w)


class UnsupportedOptimizerTest(TestCase):
    def _fit(self, make_optimizer):
        strategy = keras_hybrid.HybridStrategy(variable_kinds=SPARSE_TABLES)
        with strategy.scope():
            model = embedding_model()
            model.compile(optimizer=make_optimizer(), loss=LOSS)
        x, y = data(16)
        model.fit(x, y, batch_size=16, verbose=0)

    def test_whole_table_optimizers_are_refused_with_workaround(self):
        with self.assertRaisesRegex(NotImplementedError, "variable_kinds"):
            self._fit(keras.optimizers.Adafactor)
        with self.assertRaisesRegex(NotImplementedError, "Lamb needs"):
            self._fit(keras.optimizers.Lamb)

    def test_plain_accumulation_asks_for_the_wrapper(self):
        with self.assertRaisesRegex(
            NotImplementedError, "keras_hybrid.HybridOptimizer"
        ):
            self._fit(
                lambda: keras.optimizers.SGD(gradient_accumulation_steps=2)
            )

    def test_whole_table_optimizer_is_fine_on_a_dense_table(self):
        strategy = keras_hybrid.HybridStrategy(
            variable_kinds={".*embeddings": "dense"}
        )
        with strategy.scope():
            model = embedding_model()
            model.compile(optimizer=keras.optimizers.Adafactor(), loss=LOSS)
        x, y = data(16)
        model.fit(x, y, batch_size=16, verbose=0)
        self.assertEqual(
            strategy.plan["sequential/embedding/embeddings"].kind, "dense"
        )


PER_ELEMENT_OPTIMIZERS = {
    "sgd_momentum": lambda: keras.optimizers.SGD(0.3, momentum=0.9),
    "sgd_nesterov": lambda: keras.optimizers.SGD(
        0.3, momentum=0.9, nesterov=True
    ),
    "adam": lambda: keras.optimizers.Adam(0.05),
    "adamw": lambda: keras.optimizers.AdamW(0.05, weight_decay=0.1),
    "adagrad": lambda: keras.optimizers.Adagrad(0.3),
    "rmsprop": lambda: keras.optimizers.RMSprop(0.05),
    "adadelta": lambda: keras.optimizers.Adadelta(1.0),
    "adamax": lambda: keras.optimizers.Adamax(0.05),
    "nadam": lambda: keras.optimizers.Nadam(0.05),
    "ftrl": lambda: keras.optimizers.Ftrl(0.3),
    "lion": lambda: keras.optimizers.Lion(0.01),
}


class PerElementOptimizersTest(TestCase):
    """Every per-element Keras optimizer updates a partitioned table like
    the dense-semantics reference (1 worker; the multi-process tests cover
    SGD and Adam on 2 and 4)."""

    def test_each_optimizer_matches_reference(self):
        for name, make in PER_ELEMENT_OPTIMIZERS.items():
            with self.subTest(optimizer=name):
                keras.backend.clear_session()
                strategy = keras_hybrid.HybridStrategy(
                    variable_kinds=SPARSE_TABLES
                )
                with strategy.scope():
                    model = embedding_model()
                    model.compile(optimizer=make(), loss=LOSS)
                start = model.get_weights()
                x, y = data()
                model.fit(
                    x[:32], y[:32], batch_size=16, shuffle=False, verbose=0
                )
                got = model.get_weights()
                want = dense_semantics_reference(start, make(), 2)
                for g, w in zip(got, want, strict=True):
                    self.assertAllClose(g, w, msg=name)
                self.assertGreater(np.abs(got[0] - start[0]).max(), 1e-4)


class LossScaledOptimizerCheckTest(TestCase):
    """Under "mixed_float16" `compile` wraps the optimizer in a
    `LossScaleOptimizer`; the optimizer inside is still checked."""

    def _fit_mixed(self, make_optimizer):
        keras.mixed_precision.set_global_policy("mixed_float16")
        self.addCleanup(keras.mixed_precision.set_global_policy, "float32")
        strategy = keras_hybrid.HybridStrategy(
            variable_kinds={".*embeddings": "sparse"}
        )
        with strategy.scope():
            model = embedding_model()
            model.compile(optimizer=make_optimizer(), loss=LOSS)
        self.assertIsInstance(
            model.optimizer, keras.optimizers.LossScaleOptimizer
        )
        x, y = data(16)
        model.fit(x, y, batch_size=16, verbose=0)

    def test_whole_table_optimizer_inside_loss_scaling_is_refused(self):
        with self.assertRaisesRegex(NotImplementedError, "Adafactor"):
            self._fit_mixed(keras.optimizers.Adafactor)

    def test_plain_accumulation_inside_loss_scaling_asks_for_wrapper(self):
        with self.assertRaisesRegex(
            NotImplementedError, "keras_hybrid.HybridOptimizer"
        ):
            self._fit_mixed(
                lambda: keras.optimizers.SGD(gradient_accumulation_steps=2)
            )

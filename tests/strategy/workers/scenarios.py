"""Scenarios run the same way on N workers (with a strategy) and on one
plain-Keras process (strategy=None), so results can be compared.

`on_workers` is the pool scenario (`keras_hybrid.testing.pool`): one case
on a strategy of its own.
"""

import contextlib

import keras
import numpy as np
import tensorflow as tf

import keras_hybrid as kh
from keras_hybrid.testing import models

CASES = (
    "uneven",
    "extras",
    "embedding",
    "xla",
    "random",
    "predict",
    "long",
    "batchnorm",
    "adagrad",
    "generator",
    "partial_metrics",
    "own_mean_loss",
)


def strategy_options(case: str, indexed_slices: str | None = None) -> dict:
    """`HybridStrategy` arguments of `case`: the embedding case checks the
    stock path for a table kept dense, its IndexedSlices all-gathered (the
    cost rule could densify it)."""
    if indexed_slices:
        return {
            "variable_kinds": {".*embeddings": "dense"},
            "indexed_slices": indexed_slices,
        }
    if case == "embedding":
        return {
            "variable_kinds": {".*embeddings": "dense"},
            "indexed_slices": "allgather",
        }
    return {}


def on_workers(case: str, indexed_slices: str | None = None) -> dict:
    """Runs `case` on a strategy of this worker, and closes it."""
    options = strategy_options(case, indexed_slices)
    with kh.HybridStrategy(timeout_seconds=60, **options) as strategy:
        return run_case(case, strategy)


def seeded_shuffles() -> dict:
    """Orders of a dataset shuffled with its own seed (two epochs) under a
    2-worker strategy of a script that set no global seed, and with no
    global seed, as in one process (after the strategy: a process must
    not run TF ops before its first strategy); and an unseeded draw under
    the strategy."""
    fresh = tf.compat.v1.random.get_seed(None)[0] is None

    def orders():
        data = tf.data.Dataset.range(32).shuffle(32, seed=1)
        return [list(data.as_numpy_iterator()) for _ in range(2)]

    with kh.HybridStrategy(timeout_seconds=60):
        under = orders()
        unseeded = tf.random.uniform([4]).numpy()
    tf.random.set_seed(None)
    alone = orders()
    return {
        "fresh": fresh,
        "alone": alone,
        "under": under,
        "unseeded": unseeded,
    }


def run_case(case, strategy, callbacks=()):
    scope = strategy.scope() if strategy else contextlib.nullcontext()
    rank = strategy.rank if strategy else 0
    with scope:
        model = _model(case, seed=100 + rank)
        if case == "batchnorm":
            # Learning rate 0: the normalized features stay x @ W + b with
            # the initial W, b, so the test can recompute the statistics.
            model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse")
        elif case == "adagrad":
            # The one-process reference densifies the table's gradient:
            # Adagrad then squares each id's summed gradient once.
            optimizer = (_DenseAdagrad if strategy is None else _Adagrad)(
                0.5, name="adagrad"
            )
            model.compile(optimizer=optimizer, loss="mse")
        elif case == "own_mean_loss":
            model.compile(optimizer=keras.optimizers.SGD(0.1))
        elif case == "partial_metrics":
            model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        elif case in ("embedding", "xla"):
            model.compile(
                optimizer=keras.optimizers.SGD(0.5),
                loss="mse",
                metrics=["mae"],
                jit_compile=case == "xla",
            )
        else:
            models.compile_model(model, "sgd")
    return globals()[f"_run_{case}"](model, strategy, list(callbacks))


class _Noise(keras.layers.Layer):
    """Dropout mask and uniform noise drawn in every call, as Keras'
    random layers draw them (a `SeedGenerator` each)."""

    def __init__(self):
        super().__init__()
        self.drop_seeds = keras.random.SeedGenerator(7)
        self.noise_seeds = keras.random.SeedGenerator(8)

    def call(self, x):
        mask = keras.random.dropout(x, 0.5, seed=self.drop_seeds)
        noise = keras.random.uniform(keras.ops.shape(x), seed=self.noise_seeds)
        return keras.ops.concatenate([mask, noise], axis=1)


_Adagrad = keras.optimizers.Adagrad


class _DenseAdagrad(keras.optimizers.Adagrad):
    """Adagrad on dense gradients (stock Keras squares each duplicate id
    of an `IndexedSlices` separately)."""

    def apply(self, grads, trainable_variables=None):
        grads = [tf.convert_to_tensor(g) for g in grads]
        return super().apply(grads, trainable_variables)


class PartialMetrics(keras.Model):
    """Reports only some of its metrics in training, as keras-rs'
    multi-task example does (its top-k metric only in evaluation)."""

    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1)
        self.rmse = keras.metrics.RootMeanSquaredError(name="rmse")
        self.top = keras.metrics.MeanAbsoluteError(name="top")

    def call(self, x, training=False):
        return self.dense(x)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        self.rmse.update_state(y, y_pred, sample_weight=sample_weight)
        self.top.update_state(y, y_pred, sample_weight=sample_weight)
        result = self.get_metrics_result()
        if self._partial_metrics_training:
            result.pop("top")
        return result

    def train_step(self, data):
        self._partial_metrics_training = True
        return super().train_step(data)

    def test_step(self, data):
        self._partial_metrics_training = False
        return super().test_step(data)


class OwnMeanLoss(keras.Model):
    """Averages its loss over its own rows in `compute_loss`, as keras-rs'
    SASRec example (written for JAX) does: no Keras loss reduction, so
    nothing divides it by the number of workers."""

    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1)
        self.loss_fn = keras.losses.MeanSquaredError(reduction=None)

    def call(self, x, training=False):
        return self.dense(x)

    def compute_loss(self, x, y, y_pred, sample_weight=None, training=True):
        loss = self.loss_fn(y, y_pred)
        return keras.ops.divide_no_nan(
            keras.ops.sum(loss),
            keras.ops.cast(keras.ops.size(loss), loss.dtype),
        )


def _model(case, seed):
    if case == "own_mean_loss":
        keras.utils.set_random_seed(seed)
        return OwnMeanLoss()
    if case == "partial_metrics":
        keras.utils.set_random_seed(seed)
        return PartialMetrics()
    if case == "random":
        keras.utils.set_random_seed(seed)
        x = keras.Input((6,))
        return keras.Model(x, _Noise()(x))
    if case == "batchnorm":
        keras.utils.set_random_seed(seed)
        x = keras.Input((8,))
        h = keras.layers.Dense(4, name="features")(x)
        h = keras.layers.BatchNormalization(name="norm")(h)
        return keras.Model(x, keras.layers.Dense(1)(h))
    if case not in ("embedding", "xla", "adagrad"):
        return models.build_model("functional", seed)
    keras.utils.set_random_seed(seed)
    ids = keras.Input((5,), dtype="int32")
    x = keras.layers.Embedding(50, 4)(ids)
    x = keras.layers.GlobalAveragePooling1D()(x)
    return keras.Model(ids, keras.layers.Dense(1)(x))


def _summary(model, history, strategy):
    out = {"weights": model.get_weights(), "history": history.history}
    if strategy is not None:
        out["comm"] = strategy.communicator.stats.snapshot()
    return out


def _run_uneven(model, strategy, callbacks):
    # 130 samples, batch 64: the last global batch has 2 rows, so with 3
    # workers rank 0 gets an empty slice. It must neither hang nor diverge.
    x, y = models.make_data(130)
    history = model.fit(
        x,
        y,
        batch_size=64,
        epochs=2,
        shuffle=True,
        verbose=0,
        callbacks=callbacks,
    )
    return _summary(model, history, strategy)


def _run_extras(model, strategy, callbacks):
    x, y = models.make_data(240)
    xv, yv = models.make_data(96, seed=1)
    weights = np.linspace(0.5, 1.5, 240).astype("float32")
    history = model.fit(
        x,
        y,
        sample_weight=weights,
        batch_size=48,
        epochs=2,
        shuffle=False,
        validation_data=(xv, yv),
        validation_batch_size=48,
        verbose=0,
        callbacks=callbacks,
    )
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(48).repeat()
    more = model.fit(
        data,
        steps_per_epoch=3,
        epochs=2,
        verbose=0,
        class_weight={0: 1.0, 1: 2.0, 2: 0.5},
    )
    out = _summary(model, history, strategy)
    out["history_more"] = more.history
    return out


def _run_embedding(model, strategy, callbacks):
    rng = np.random.default_rng(3)
    ids = (rng.zipf(1.3, size=(192, 5)) % 50).astype("int32")
    y = rng.normal(size=(192, 1)).astype("float32")
    history = model.fit(
        ids,
        y,
        batch_size=48,
        epochs=2,
        shuffle=False,
        verbose=0,
        callbacks=callbacks,
    )
    return _summary(model, history, strategy)


def _run_adagrad(model, strategy, callbacks):
    return _run_embedding(model, strategy, callbacks)


def _run_xla(model, strategy, callbacks):
    out = _run_embedding(model, strategy, callbacks)
    out["jit_compile"] = bool(model.jit_compile)
    out["predictions"] = model.predict(
        np.arange(40, dtype="int32").reshape(8, 5) % 50, verbose=0
    )
    return out


def _run_random(model, strategy, callbacks):
    # 16 rows, batch 8: two steps, each worker 4 rows of each on 2.
    ones = np.ones((16, 6), "float32")
    return {"predictions": model.predict(ones, batch_size=8, verbose=0)}


def _run_predict(model, strategy, callbacks):
    x, _ = models.make_data(100)
    return {"predictions": model.predict(x, batch_size=32, verbose=0)}


def _run_long(model, strategy, callbacks):
    # Long enough that a worker can die in the middle.
    x, y = models.make_data(2400)
    history = model.fit(
        x, y, batch_size=48, epochs=3, verbose=0, callbacks=callbacks
    )
    return _summary(model, history, strategy)


def _run_batchnorm(model, strategy, callbacks):
    # Two global batches of 48: each of 2 workers normalizes its 24 rows
    # with their own statistics (unsynchronized, Keras' default).
    x, _ = models.make_data(96)
    y = np.zeros((96, 1), "float32")
    history = model.fit(x, y, batch_size=48, epochs=1, shuffle=False, verbose=0)
    out = _summary(model, history, strategy)
    norm = model.get_layer("norm")
    out["moving_mean"] = norm.moving_mean.numpy()
    out["moving_variance"] = norm.moving_variance.numpy()
    out["features"] = [w.numpy() for w in model.get_layer("features").weights]
    return out


def _run_generator(model, strategy, callbacks):
    # 10 batches of 48 from a Python generator, in order: Keras' build
    # under a strategy must not draw (and lose) any of them.
    x, y = models.make_data(480)

    def batches():
        while True:
            for start in range(0, 480, 48):
                yield x[start : start + 48], y[start : start + 48]

    history = model.fit(batches(), steps_per_epoch=8, epochs=2, verbose=0)
    return _summary(model, history, strategy)


def _regression_data():
    x, y = models.make_data(192)
    return x, y.astype("float32")[:, None]


def _fit_regression(model, callbacks, x, y, **fit_kwargs):
    """`x, y` in global batches of 48, 2 epochs, in order."""
    return model.fit(
        x,
        y,
        batch_size=48,
        epochs=2,
        shuffle=False,
        verbose=0,
        callbacks=callbacks,
        **fit_kwargs,
    )


def _run_partial_metrics(model, strategy, callbacks):
    # Each worker's rmse differs from the batch's, so a log left local
    # would differ from one process.
    x, y = _regression_data()
    history = _fit_regression(model, callbacks, x, y)
    out = _summary(model, history, strategy)
    out["evaluate"] = model.evaluate(
        x, y, batch_size=48, verbose=0, return_dict=True
    )
    return out


def _run_own_mean_loss(model, strategy, callbacks):
    x, y = _regression_data()
    history = _fit_regression(
        model, callbacks, x, y, validation_data=(x[:96], y[:96])
    )
    return _summary(model, history, strategy)

"""Global batches that do not split evenly over the workers (250 rows on
3 workers, then a last batch of 200), with Keras' own loss, with a
custom `train_step` that averages its loss itself, with losses averaged
over a mask (padding and `ignore_class`) and over sample weights
(`reduction="mean_with_sample_weight"`), with two outputs,
whose per-output losses Keras logs as the mean of each batch's mean (and
validates), and with a strong L2 penalty on the partitioned table (its
rows' share of the penalty's gradient is the workers' summed upstream,
not N times this worker's).

`on_workers` is the scenario the shared pool runs;
`uneven_batch_worker.py` runs `train_both` as one plain process for the
reference.
"""

import keras
import numpy as np
import tensorflow as tf

import keras_hybrid as kh
from keras_hybrid.testing.models import SPARSE_TABLES


class OwnMeanModel(keras.Model):
    """A `train_step` written for one device: its loss is a plain mean."""

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self(x, training=True) - y))
        grads = tape.gradient(loss, self.trainable_variables)
        pairs = zip(grads, self.trainable_variables, strict=True)
        self.optimizer.apply_gradients(pairs)
        return {"own_loss": loss}


def build(kind):
    keras.utils.set_random_seed(7)
    ids = keras.Input((3,), dtype="int32")
    dense = keras.Input((4,))
    penalty = keras.regularizers.L2(0.05) if kind == "regularized" else None
    rows = keras.layers.Embedding(
        50,
        4,
        name="items",
        embeddings_regularizer=penalty,
        mask_zero=kind == "masked",
    )(ids)
    if kind == "masked":  # a class per id; padding (id 0) is masked
        return keras.Model([ids, dense], keras.layers.Dense(5)(rows))
    pooled = keras.layers.GlobalAveragePooling1D()(rows)
    hidden = keras.layers.Dense(8, activation="tanh")(
        keras.layers.Concatenate()([pooled, dense])
    )
    out = keras.layers.Dense(1)(hidden)
    if kind == "two_outputs":
        second = keras.layers.Dense(1, name="b")(hidden)
        return keras.Model([ids, dense], {"a": out, "b": second})
    cls = OwnMeanModel if kind == "own_mean" else keras.Model
    return cls([ids, dense], out)


KINDS = (
    "keras",
    "own_mean",
    "two_outputs",
    "regularized",
    "masked",
    "weighted_mean",
)


def data(num_samples):
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 50, size=(num_samples, 3)).astype("int32")
    dense = rng.normal(size=(num_samples, 4)).astype("float32")
    y = (dense.sum(axis=1, keepdims=True) + ids[:, :1] / 50.0).astype("float32")
    return ids, dense, y


def train(strategy, kind, batch_size=250, num_samples=700):
    ids, dense, y = data(num_samples)
    loss, metrics, extra = "mse", ["mae"], {}
    if kind == "masked":
        # Padding from none to all of a row's ids, so the workers' slices
        # hold different shares of it: the loss is the
        # mean over the global batch's unmasked ids (and `ignore_class`).
        rows = np.arange(num_samples)[:, None] % 7
        ids = np.where(rows < np.array([[1, 3, 5]]), 0, ids)
        y = ids % 5
        loss = keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, ignore_class=0
        )
        metrics = ["sparse_categorical_accuracy"]
    if kind == "weighted_mean":
        # The mean over the global batch's sample weights.
        loss = keras.losses.MeanSquaredError(
            reduction="mean_with_sample_weight"
        )
        extra["sample_weight"] = np.linspace(0.0, 3.0, num_samples) ** 2
    if kind == "two_outputs":
        y = {"a": y, "b": np.tanh(y)}
        loss = {"a": "mse", "b": "mae"}
        metrics = {"a": ["mae"]}
        extra["validation_data"] = (
            [ids[:130], dense[:130]],
            {"a": y["a"][:130], "b": y["b"][:130]},
        )
        extra["validation_batch_size"] = 100
    with strategy.scope():
        model = build(kind)
        model.compile(
            optimizer=keras.optimizers.SGD(0.1), loss=loss, metrics=metrics
        )
    history = model.fit(
        [ids, dense],
        y,
        batch_size=batch_size,
        epochs=3,
        shuffle=False,
        verbose=0,
        **extra,
    )
    return {"weights": model.get_weights(), "history": history.history}


def train_both(strategy, batch_size=250, num_samples=700):
    """Kind -> this rank's weights and history, for each kind of model."""
    return {
        kind: train(strategy, kind, batch_size, num_samples) for kind in KINDS
    }


def on_workers():
    """Pool scenario: `train_both` under a strategy of its own."""
    with kh.HybridStrategy(variable_kinds=SPARSE_TABLES) as strategy:
        return train_both(strategy)

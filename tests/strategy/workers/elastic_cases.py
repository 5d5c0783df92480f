"""Models and data of the elastic `fit` worker, importable without its
flags (the test builds the one-process reference from them)."""

import keras
import numpy as np
import tensorflow as tf

from keras_hybrid.testing import models

MODELS = ("mlp", "table")
VOCAB = 500  # table rows: 500 virtual shards
SEQ = 4  # ids per sample


def build_model(name: str, seed: int) -> keras.Model:
    """`mlp`: the 8 -> 16 -> 3 MLP of `testing.models`; `table`: an
    `Embedding(500, 8)` of 4 ids, averaged, concatenated with 8 dense
    features -> Dense(16) -> Dense(3)."""
    if name == "mlp":
        return models.build_model("sequential", seed=seed)
    if name != "table":
        raise ValueError(f"`name` must be one of {MODELS}. Received: {name!r}")
    keras.utils.set_random_seed(seed)
    ids = keras.Input((SEQ,), dtype="int32", name="ids")
    features = keras.Input((8,), name="features")
    x = keras.layers.Embedding(VOCAB, 8, name="table")(ids)
    x = keras.layers.GlobalAveragePooling1D(name="pool")(x)
    x = keras.layers.Concatenate(name="concat")([x, features])
    x = keras.layers.Dense(16, activation="tanh", name="hidden")(x)
    return keras.Model([ids, features], keras.layers.Dense(3, name="head")(x))


def make_data(name: str, num_samples: int):
    """Inputs and 3-class labels for model `name`."""
    x, y = models.make_data(num_samples)
    if name == "mlp":
        return x, y
    rng = np.random.default_rng(1)
    # Zipf-ish repeats, hot ids scattered over the vocabulary.
    ranks = (rng.zipf(1.3, size=(num_samples, SEQ)) - 1) % VOCAB
    ids = rng.permutation(VOCAB)[ranks].astype("int32")
    scores = rng.normal(size=(VOCAB, 3)).astype("float32")
    y = np.argmax(scores[ids].sum(axis=1) + x[:, :3], axis=1)
    return (ids, x), y.astype("int32")


def table_reference(initial, num_samples=480, epochs=2, batch_size=12):
    """The `table` model trained by a plain Keras loop in one process on
    the global batches in order (no shuffle), from the job's `initial`
    weights, with the table's gradient made dense (summed per id, as the
    strategy applies it for Adam). Returns the final weights."""
    (ids, x), y = make_data("table", num_samples)
    model = build_model("table", seed=100)
    model.set_weights(initial)
    optimizer = models.make_optimizer("adam")
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    variables = model.trainable_variables
    for _ in range(epochs):
        for start in range(0, num_samples, batch_size):
            batch = slice(start, start + batch_size)
            with tf.GradientTape() as tape:
                logits = model([ids[batch], x[batch]], training=True)
                loss = loss_fn(y[batch], logits)
            grads = tape.gradient(loss, [v.value for v in variables])
            grads = [tf.convert_to_tensor(g) for g in grads]
            optimizer.apply(grads, variables)
    return model.get_weights()

"""The soak's model and data, and the uninterrupted run it is checked
against.

A functional model with a partitioned table: 4 ids per sample look up an
`Embedding(VOCAB, 8)`, averaged and concatenated with 8 dense features,
then Dense(16, tanh) -> Dense(3); Adam. The ids repeat Zipf-like, so that
rows are shared across a batch's slices. The reference trains the same
model in one process on the same global batches in order, with the
table's gradient summed per id before Adam (as the strategy applies it:
dense-gradient semantics).
"""

import keras
import numpy as np
import tensorflow as tf

from keras_hybrid.testing import models

VOCAB = 400  # table rows: 400 one-row virtual shards
SEQ = 4  # ids per sample
SEED = 100  # the model's weights, the same on every worker


def build_model() -> keras.Model:
    """The soak's model, compiled with Adam, weights from `SEED`."""
    keras.utils.set_random_seed(SEED)
    ids = keras.Input((SEQ,), dtype="int32", name="ids")
    features = keras.Input((8,), name="features")
    x = keras.layers.Embedding(VOCAB, 8, name="table")(ids)
    x = keras.layers.GlobalAveragePooling1D(name="pool")(x)
    x = keras.layers.Concatenate(name="concat")([x, features])
    x = keras.layers.Dense(16, activation="tanh", name="hidden")(x)
    head = keras.layers.Dense(3, name="head")(x)
    model = keras.Model([ids, features], head, name="soak")
    models.compile_model(model, "adam")
    return model


def make_data(num_samples: int):
    """`((ids, features), labels)` for `num_samples` samples."""
    features, _ = models.make_data(num_samples)
    rng = np.random.default_rng(1)
    ranks = (rng.zipf(1.3, size=(num_samples, SEQ)) - 1) % VOCAB
    ids = rng.permutation(VOCAB)[ranks].astype("int32")
    scores = rng.normal(size=(VOCAB, 3)).astype("float32")
    labels = np.argmax(scores[ids].sum(axis=1) + features[:, :3], axis=1)
    return (ids, features), labels.astype("int32")


def reference_weights(
    initial: list, num_samples: int, epochs: int, batch_size: int
) -> list:
    """The model trained from `initial` weights in one process by a plain
    loop over the global batches in order; its final weights."""
    (ids, features), labels = make_data(num_samples)
    model = build_model()
    model.set_weights(initial)
    optimizer = models.make_optimizer("adam")
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    variables = model.trainable_variables
    for _ in range(epochs):
        for start in range(0, num_samples, batch_size):
            batch = slice(start, start + batch_size)
            with tf.GradientTape() as tape:
                logits = model([ids[batch], features[batch]], training=True)
                loss = loss_fn(labels[batch], logits)
            grads = tape.gradient(loss, [v.value for v in variables])
            # Summed per id: the strategy's (dense-gradient) semantics.
            grads = [tf.convert_to_tensor(g) for g in grads]
            optimizer.apply(grads, variables)
    return model.get_weights()


def max_difference(got: list, want: list) -> float:
    """Float. The largest absolute difference between two weight lists."""
    if len(got) != len(want):
        return float("inf")
    return max(
        float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
        for a, b in zip(got, want, strict=True)
    )

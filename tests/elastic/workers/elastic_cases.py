"""Models and data of the elastic `fit` worker, importable without its
flags (the test builds the one-process reference from them).

Besides the MLP and the functional `table` model, the shapes users write,
taken from the placement zoo (`tests/strategy/workers/placement_shapes.py`)
where it has them:
`custom_table`, a subclassed model whose table lives in the zoo's custom
layer `TokenAndPosition` (3000 x 32 token table, 2-row position table);
`sequential`, a `Sequential` with an `Embedding`; `shared`, two lookups
of one table; `two_dims`, two tables of different widths; `keras_rs`,
keras-rs's `EmbedReduce` (if keras-rs is installed); `dynamic`, a
`DynamicEmbedding` over 64-bit keys (admitted at their second step);
`dynamic_strings`, the same keys made strings in the model (string keys
travel as their 63-bit hashes on several workers).
"""

import os
import sys

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from keras_hybrid.dynamic import key_hash
from keras_hybrid.layers import DynamicEmbedding
from keras_hybrid.testing import models

sys.path.insert(
    0,
    os.path.join(os.path.dirname(__file__), "..", "..", "strategy", "workers"),
)
import placement_shapes as zoo  # noqa: E402

MODELS = (
    "mlp",
    "table",
    "custom_table",
    "sequential",
    "shared",
    "two_dims",
    "keras_rs",
    "dynamic",
    "dynamic_strings",
)
VOCAB = 500  # table rows: 500 virtual shards
DYNAMIC_CAPACITY = 512  # per worker: every key fits on one, no eviction
SEQ = 4  # ids per sample


class CustomTableModel(keras.Model):
    """Subclassed: the zoo's `TokenAndPosition` layer holds the tables;
    their mean is concatenated with 8 dense features -> Dense -> Dense."""

    def __init__(self, **kwargs):
        super().__init__(name="custom_table", **kwargs)
        self.tok_pos = zoo.TokenAndPosition(name="tok_pos")
        self.hidden = keras.layers.Dense(16, activation="tanh", name="hidden")
        self.head = keras.layers.Dense(3, name="head")

    def call(self, inputs):
        ids, features = inputs
        x = ops.mean(self.tok_pos(ids), axis=1)
        return self.head(self.hidden(ops.concatenate([x, features], -1)))


def _with_features(name: str, embed, dtype="int32") -> keras.Model:
    """`embed(ids)` -> (batch, width), beside 8 features -> Dense -> 3."""
    ids = keras.Input((SEQ,), dtype=dtype, name="ids")
    features = keras.Input((8,), name="features")
    x = keras.layers.Concatenate(name="concat")([embed(ids), features])
    x = keras.layers.Dense(16, activation="tanh", name="hidden")(x)
    head = keras.layers.Dense(3, name="head")(x)
    return keras.Model([ids, features], head, name=name)


def _shared(ids):
    table = keras.layers.Embedding(VOCAB, 8, name="table")
    pool = keras.layers.GlobalAveragePooling1D(name="pool")
    left = pool(table(ids[:, :2]))
    return keras.layers.Multiply(name="mul")([left, pool(table(ids[:, 2:]))])


def _two_dims(ids):
    wide = keras.layers.Embedding(VOCAB, 8, name="wide")(ids[:, :2])
    narrow = keras.layers.Embedding(VOCAB, 4, name="narrow")(ids[:, 2:])
    return keras.layers.Concatenate(name="both")(
        [keras.layers.Flatten()(wide), keras.layers.Flatten()(narrow)]
    )


def _keras_rs(ids):
    import keras_rs

    return keras_rs.layers.EmbedReduce(VOCAB, 8, combiner="mean", name="rs")(
        ids
    )


def _sequential() -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((SEQ,), dtype="int32"),
            keras.layers.Embedding(VOCAB, 8, name="table"),
            keras.layers.GlobalAveragePooling1D(name="pool"),
            keras.layers.Dense(16, activation="tanh", name="hidden"),
            keras.layers.Dense(3, name="head"),
        ],
        name="sequential",
    )


def _dynamic(keys):
    layer = DynamicEmbedding(
        8, capacity=DYNAMIC_CAPACITY, admit_after=2, name="dyn"
    )
    x = layer(keys)
    return keras.layers.GlobalAveragePooling1D(name="pool")(x)


class AsStrings(keras.layers.Layer):
    """64-bit keys as strings (`"user-<key>"`): string keys from arrays,
    which Keras' array adapter takes only as numbers."""

    def call(self, keys):
        return tf.strings.join(["user-", tf.strings.as_string(keys)])

    def compute_output_spec(self, keys):
        return keras.KerasTensor(keys.shape, dtype="string")


_BUILDERS = {
    "sequential": _sequential,
    "shared": lambda: _with_features("shared", _shared),
    "two_dims": lambda: _with_features("two_dims", _two_dims),
    "keras_rs": lambda: _with_features("keras_rs", _keras_rs),
    "dynamic": lambda: _with_features("dynamic", _dynamic, "int64"),
    "dynamic_strings": lambda: _with_features(
        "dynamic_strings", lambda keys: _dynamic(AsStrings()(keys)), "int64"
    ),
}


def build_model(name: str, seed: int) -> keras.Model:
    """`mlp`: the 8 -> 16 -> 3 MLP of `testing.models`; `table`: an
    `Embedding(500, 8)` of 4 ids, averaged, concatenated with 8 dense
    features -> Dense(16) -> Dense(3)."""
    if name == "mlp":
        return models.build_model("sequential", seed=seed)
    if name not in MODELS:
        raise ValueError(f"`name` must be one of {MODELS}. Received: {name!r}")
    keras.utils.set_random_seed(seed)
    if name == "custom_table":
        model = CustomTableModel()
        model(make_data(name, 2)[0])  # builds the weights
        return model
    if name in _BUILDERS:
        return _BUILDERS[name]()
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
    rows, seq = (
        (zoo.ROWS, zoo.POSITIONS)
        if name == "custom_table"
        else (
            VOCAB,
            SEQ,
        )
    )
    rng = np.random.default_rng(1)
    # Zipf-ish repeats, hot ids scattered over the vocabulary.
    ranks = (rng.zipf(1.3, size=(num_samples, seq)) - 1) % rows
    ids = rng.permutation(rows)[ranks].astype("int32")
    scores = rng.normal(size=(rows, 3)).astype("float32")
    y = np.argmax(scores[ids].sum(axis=1) + x[:, :3], axis=1)
    if name.startswith("dynamic"):
        # The same ids as 64-bit keys from the whole range.
        pool = rng.integers(-(2**63), 2**63 - 1, size=rows, dtype=np.int64)
        ids = pool[ids]
    if name == "sequential":
        return ids, y.astype("int32")
    return (ids, x), y.astype("int32")


def table_reference(
    initial,
    num_samples=480,
    epochs=2,
    batch_size=12,
    name="table",
    optimizer="adam",
):
    """Model `name` (`table` by default) trained by a plain Keras loop in
    one process on the global batches in order (no shuffle), from the
    job's `initial` weights, with the table's gradient made dense (summed
    per id, as the strategy applies it for Adam). Returns the final
    weights."""
    return _trained(
        initial, num_samples, epochs, batch_size, name, optimizer
    ).get_weights()


def dynamic_reference(
    initial, optimizer="adam", num_samples=480, name="dynamic"
):
    """A `dynamic` model trained as `table_reference` trains (in one
    process, the dynamic table's gradient made dense). Returns
    `{"rows": {key: row}, "dense": hidden and head weights}`, string keys
    as the int64 hashes that stand for them on several workers."""
    model = _trained(initial, num_samples, 2, 12, name, optimizer)
    keys, values = model.get_layer("dyn").live_rows()
    if name == "dynamic_strings":
        keys = key_hash.string_keys(tf.constant(keys)).numpy()
    return {
        "rows": dict(zip(keys.tolist(), values, strict=True)),
        "dense": dense_weights(model),
    }


def dense_weights(model) -> list:
    """The weights of the `hidden` and `head` layers."""
    return [
        w for n in ("hidden", "head") for w in model.get_layer(n).get_weights()
    ]


def _trained(initial, num_samples, epochs, batch_size, name, optimizer):
    inputs, y = make_data(name, num_samples)
    model = build_model(name, seed=100)
    model.set_weights(initial)
    optimizer = models.make_optimizer(optimizer)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    variables = model.trainable_variables
    # Built first: a dynamic table resets the slot rows of new keys.
    optimizer.build(variables)

    @tf.function
    def step(inputs, labels):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(inputs, training=True))
        grads = tape.gradient(loss, [v.value for v in variables])
        grads = [tf.convert_to_tensor(g) for g in grads]
        optimizer.apply(grads, variables)

    for _ in range(epochs):
        for start in range(0, num_samples, batch_size):
            batch = slice(start, start + batch_size)
            step(_rows(inputs, batch), y[batch])
    return model


def _rows(inputs, batch: slice):
    """Rows `batch` of an array or of a tuple of arrays."""
    if isinstance(inputs, tuple):
        return [a[batch] for a in inputs]
    return inputs[batch]

"""Models, data and optimizers shared by the sparse-table workers and the
tests that compute their plain-Keras references.

Ids are Zipf-skewed so that every batch looks up some ids several times:
that is where deduplicating sparse gradients matters (Adam squares the
summed gradient of an id, not each occurrence).
"""

import keras
import numpy as np
import tensorflow as tf

VOCAB = 500
SEQ = 6
BATCH = 32
STEPS = 20
SEED = 7
MODELS = (
    "one_table",
    "two_tables",
    "shared_table",
    "sequential",
    "widths_dtypes",
    "chained",
    "lookup_layers",
    "frozen_table",
)
OPTIMIZERS = ("sgd", "adam")
# Paths of the variables each model trains, in `get_weights()` order.
TABLES = {
    "one_table": ("table/embeddings",),
    "two_tables": ("table_a/embeddings", "table_b/embeddings"),
    "shared_table": ("table/embeddings",),
    "sequential": ("sequential/table/embeddings",),
    "widths_dtypes": ("table_a/embeddings", "table_b/embeddings"),
    "chained": ("table_a/embeddings", "table_b/embeddings"),
    "lookup_layers": ("table_a/embeddings", "table_b/embeddings"),
    "frozen_table": ("table_b/embeddings",),
    "frozen_only": (),
}
# Partitioned tables of layers made with `trainable=False`: placed like
# the others and read every step, but not trained (no optimizer slots).
FROZEN = {
    "frozen_table": ("table_a/embeddings",),
    "frozen_only": ("table_a/embeddings",),
}
DENSE = ("head/kernel", "head/bias")


def dense_paths(model: str) -> tuple:
    """Paths of the dense head of `model` (a Sequential prefixes its
    name)."""
    if model == "sequential":
        return tuple(f"sequential/{p}" for p in DENSE)
    return DENSE


def make_data(num_samples: int = STEPS * BATCH, seed: int = 0):
    """Ids (n, SEQ) with Zipf-ish repeats, and 3-class labels."""
    rng = np.random.default_rng(seed)
    ranks = (rng.zipf(1.3, size=(num_samples, SEQ)) - 1) % VOCAB
    # Hot ids scattered over the vocabulary rather than all near 0.
    ids = rng.permutation(VOCAB)[ranks].astype("int32")
    scores = rng.normal(size=(VOCAB, 3)).astype("float32")
    y = np.argmax(scores[ids].sum(axis=1), axis=1).astype("int32")
    return ids, y


def build_model(name: str) -> keras.Model:
    """`one_table`: Embedding(500, 8) -> mean -> Dense(3); `two_tables`:
    Embedding(500, 8) and Embedding(500, 4) of the same ids, concatenated,
    -> mean -> Dense(3); `shared_table`: one Embedding(500, 8) looked up
    twice, with the ids and with `(7 ids + 3) % 500`, concatenated, -> mean
    -> Dense(3). Two lookups of one table push two gradients in one
    backward pass (the pairwise all-to-all once hung there).
    `sequential`: `one_table` as a `keras.Sequential`; `widths_dtypes`:
    Embedding(500, 8) and a float64 Embedding(500, 3) of other ids, one
    fused exchange for two widths and dtypes; `chained`: the second
    table's ids depend on the first lookup's rows (its own exchange);
    `lookup_layers`: ids through `IntegerLookup` into one table and, as
    strings, through `StringLookup` into another: ids computed by a
    `tf.lookup` table, whose shape a function pruned from the step loses.
    `frozen_table`: a frozen Embedding(500, 8) (`trainable=False`, as a
    pretrained embedding) of the ids beside a trained Embedding(500, 4)
    of `(11 ids + 5) % 500`: the tape still traces the frozen table's
    push, whose result no gradient asks for. `frozen_only` (not in
    `MODELS`: the generic tests expect a trained table): `one_table`
    frozen, the step's only table, so no gradient takes its push (the
    pairwise exchange once ran its sends and pruned its receives there,
    and hung)."""
    if name == "sequential":
        return keras.Sequential(
            [
                keras.Input((SEQ,), dtype="int32", name="ids"),
                keras.layers.Embedding(VOCAB, 8, name="table"),
                keras.layers.GlobalAveragePooling1D(name="pool"),
                keras.layers.Dense(3, name="head"),
            ],
            name="sequential",
        )
    ids = keras.Input((SEQ,), dtype="int32", name="ids")
    if name == "one_table":
        x = keras.layers.Embedding(VOCAB, 8, name="table")(ids)
    elif name == "two_tables":
        a = keras.layers.Embedding(VOCAB, 8, name="table_a")(ids)
        b = keras.layers.Embedding(VOCAB, 4, name="table_b")(ids)
        x = keras.layers.Concatenate(name="concat")([a, b])
    elif name == "shared_table":
        table = keras.layers.Embedding(VOCAB, 8, name="table")
        other = keras.ops.mod(ids * 7 + 3, VOCAB)
        x = keras.layers.Concatenate(name="concat")([table(ids), table(other)])
    elif name == "frozen_only":
        x = keras.layers.Embedding(VOCAB, 8, name="table_a", trainable=False)(
            ids
        )
    elif name == "frozen_table":
        a = keras.layers.Embedding(VOCAB, 8, name="table_a", trainable=False)
        b = keras.layers.Embedding(VOCAB, 4, name="table_b")(
            keras.ops.mod(ids * 11 + 5, VOCAB)
        )
        x = keras.layers.Concatenate(name="concat")([a(ids), b])
    elif name == "widths_dtypes":
        a = keras.layers.Embedding(VOCAB, 8, name="table_a")(ids)
        b = keras.layers.Embedding(VOCAB, 3, name="table_b", dtype="float64")(
            keras.ops.mod(ids * 11 + 5, VOCAB)
        )
        b = keras.ops.cast(b, "float32")
        x = keras.layers.Concatenate(name="concat")([a, b])
    elif name == "chained":
        a = keras.layers.Embedding(VOCAB, 8, name="table_a")(ids)
        # The second lookup's ids depend on the first lookup's rows, so
        # they cannot be known before the step: it exchanges on its own.
        follow = keras.ops.mod(
            ids + 37 * keras.ops.cast(keras.ops.argmax(a, axis=-1), "int32"),
            VOCAB,
        )
        b = keras.layers.Embedding(VOCAB, 4, name="table_b")(follow)
        x = keras.layers.Concatenate(name="concat")([a, b])
    elif name == "lookup_layers":
        # Index 0 is the out-of-vocabulary id, so VOCAB - 1 known keys
        # give ids in [0, VOCAB).
        keys = list(range(VOCAB - 1))
        a = keras.layers.IntegerLookup(vocabulary=keys, name="int_ids")(ids)
        a = keras.layers.Embedding(VOCAB, 8, name="table_a")(a)
        words = _AsString(name="as_string")(ids)
        b = keras.layers.StringLookup(
            vocabulary=[str(k) for k in keys], name="str_ids"
        )(words)
        b = keras.layers.Embedding(VOCAB, 4, name="table_b")(b)
        x = keras.layers.Concatenate(name="concat")([a, b])
    else:
        raise ValueError(f"Unknown model {name!r}; use one of {MODELS}.")
    x = keras.layers.GlobalAveragePooling1D(name="pool")(x)
    outputs = keras.layers.Dense(3, name="head")(x)
    return keras.Model(ids, outputs, name=name)


class _AsString(keras.layers.Layer):
    """Integer ids as their decimal strings (a string-id pipeline)."""

    def call(self, ids):
        return tf.strings.as_string(ids)

    def compute_output_spec(self, ids):
        return keras.KerasTensor(ids.shape, dtype="string")


def make_optimizer(name: str, **kwargs) -> keras.optimizers.Optimizer:
    """Plain SGD (lr 0.1) or Adam (lr 0.01); `kwargs` go to it."""
    if name == "sgd":
        return keras.optimizers.SGD(learning_rate=0.1, **kwargs)
    if name == "adam":
        return keras.optimizers.Adam(learning_rate=0.01, **kwargs)
    raise ValueError(f"Unknown optimizer {name!r}; use one of {OPTIMIZERS}.")


def make_loss():
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def key(model: str, optimizer: str, accumulation: int = 0) -> str:
    """Name of one training config in a worker's results."""
    name = f"{model}/{optimizer}"
    return f"{name}/accum{accumulation}" if accumulation else name


def dedup_reference(model_name: str, opt_name: str, initial: list) -> list:
    """One process, the global batches in order, from `initial`, each
    table gradient summed per id (made dense) before `optimizer.apply`:
    the dense-gradient semantics the strategy promises (for SGD the same
    as `model.fit`)."""
    keras.backend.clear_session()
    model = build_model(model_name)
    model.set_weights(initial)
    optimizer = make_optimizer(opt_name)
    loss_fn = make_loss()
    variables = model.trainable_variables
    x, y = make_data()
    for step in range(STEPS):
        rows = slice(step * BATCH, (step + 1) * BATCH)
        with tf.GradientTape() as tape:
            loss = loss_fn(y[rows], model(x[rows], training=True))
        grads = tape.gradient(loss, [v.value for v in variables])
        optimizer.apply([tf.convert_to_tensor(g) for g in grads], variables)
    return model.get_weights()

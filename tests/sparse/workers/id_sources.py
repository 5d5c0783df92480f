"""Where ids come from, and models that look them up: the generated
matrix of `test_id_sources_multiprocess.py`.

Each id source turns the same raw data (Zipf-skewed integers) into table
ids, inside the model or in the `tf.data` pipeline; each model shape
looks them up in partitioned tables. The raw values cover the vocabulary,
so every source yields ids in `[0, ROWS)`.
"""

import contextlib
import json
import os

import keras
import numpy as np
import tensorflow as tf

from keras_hybrid.comm.host_groups import HOSTS_ENV

ROWS = 64
DIM = 4
SEQ = 5
BATCH = 24
STEPS = 6
SEED = 5
SOURCES = (
    "int",
    "string_lookup",
    "integer_lookup",
    "hashing",
    "static_hash_table",
    "hash_bucket_in_model",
    "hash_bucket_in_data",
    "unknown_lengths",
    "masked",
    "float_cast",
    "ragged",
)
SHAPES = ("pooled", "two_tower", "subclassed")
OPTIMIZERS = ("sgd", "adam")
# Exchange paths: the step's lookups fused into one exchange, one
# exchange per lookup, the fused exchange run hierarchically over 2
# emulated hosts (an even number of workers).
PATH_KINDS = ("fused", "per_lookup", "hierarchical")


def raw_data():
    """`(values, y)`: int values (STEPS * BATCH, SEQ) in [1, ROWS - 1),
    Zipf-skewed, and float targets."""
    rng = np.random.default_rng(SEED)
    n = STEPS * BATCH
    ranks = (rng.zipf(1.3, size=(n, SEQ)) - 1) % (ROWS - 2)
    values = rng.permutation(ROWS - 2)[ranks] + 1
    y = rng.normal(size=(n, 1)).astype("float32")
    return values.astype("int64"), y


def _keys() -> list[int]:
    return list(range(1, ROWS - 1))


# Layer classes here have public names: stock Keras (one process, no
# strategy) refuses a layer whose class name starts with "_" when a
# subclassed model calls it in a traced step ("'__static_table' is not a
# valid root scope name"), so such a model trains nowhere.


class AsString(keras.layers.Layer):
    def call(self, x):
        return tf.strings.as_string(x)

    def compute_output_spec(self, x):
        return keras.KerasTensor(x.shape, dtype="string")


class HashBucket(keras.layers.Layer):
    def call(self, x):
        return tf.strings.to_hash_bucket_fast(x, ROWS)

    def compute_output_spec(self, x):
        return keras.KerasTensor(x.shape, dtype="int64")


class StaticTableIds(keras.layers.Layer):
    """A raw `tf.lookup.StaticHashTable` from values to ids."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        keys = tf.constant(_keys(), tf.int64)
        self.table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(keys, keys), default_value=0
        )

    def call(self, x):
        return self.table.lookup(tf.cast(x, tf.int64))

    def compute_output_spec(self, x):
        return keras.KerasTensor(x.shape, dtype="int64")


class ToInt(keras.layers.Layer):
    def call(self, x):
        return tf.cast(x, "int32")

    def compute_output_spec(self, x):
        return keras.KerasTensor(x.shape, dtype="int32")


class ToDense(keras.layers.Layer):
    def call(self, x):
        return x.to_tensor(default_value=0)

    def compute_output_spec(self, x):
        return keras.KerasTensor((x.shape[0], None), dtype=x.dtype)


def _input_dtype(source: str) -> str:
    if source in ("string_lookup", "hashing", "hash_bucket_in_model"):
        return "string"
    if source == "float_cast":
        return "float32"
    return "int64"


def _to_ids(source: str, x):
    """The model-side part of `source`: raw input tensor -> int ids."""
    if source == "string_lookup":
        vocab = [str(k) for k in _keys()]
        return keras.layers.StringLookup(vocabulary=vocab)(x)
    if source == "integer_lookup":
        return keras.layers.IntegerLookup(vocabulary=_keys())(x)
    if source == "hashing":
        return keras.layers.Hashing(num_bins=ROWS)(x)
    if source == "static_hash_table":
        return StaticTableIds()(x)
    if source == "hash_bucket_in_model":
        return HashBucket()(x)
    if source == "float_cast":
        return ToInt()(x)
    if source == "ragged":
        return ToDense()(x)
    return x


def _input(source: str, name: str):
    length = None if source in ("unknown_lengths", "ragged") else SEQ
    return keras.Input(
        (length,),
        dtype=_input_dtype(source),
        name=name,
        ragged=source == "ragged",
    )


class SubclassedModel(keras.Model):
    """A subclassed model holding its table in a dict attribute."""

    def __init__(self, source: str):
        super().__init__()
        self.source = source
        self.parts = {
            "table": keras.layers.Embedding(ROWS, DIM, name="table"),
        }
        self.head = keras.layers.Dense(1, name="head")
        if source == "string_lookup":
            self.lookup = keras.layers.StringLookup(
                vocabulary=[str(k) for k in _keys()]
            )
        elif source == "integer_lookup":
            self.lookup = keras.layers.IntegerLookup(vocabulary=_keys())
        elif source == "hashing":
            self.lookup = keras.layers.Hashing(num_bins=ROWS)
        elif source == "static_hash_table":
            self.lookup = StaticTableIds()

    def call(self, x):
        if hasattr(self, "lookup"):
            x = self.lookup(x)
        elif self.source == "hash_bucket_in_model":
            x = tf.strings.to_hash_bucket_fast(x, ROWS)
        elif self.source == "float_cast":
            x = tf.cast(x, "int32")
        elif self.source == "ragged":
            x = x.to_tensor(default_value=0)
        rows = self.parts["table"](x)
        return self.head(tf.reduce_mean(rows, axis=1))


def build(source: str, shape: str) -> keras.Model:
    """The model of `shape` fed by `source`, with fixed initial weights."""
    keras.utils.set_random_seed(SEED)
    if shape == "subclassed":
        model = SubclassedModel(source)
        model(_first(source))
        return model
    mask = source == "masked"
    if shape == "pooled":
        raw = _input(source, "ids")
        rows = keras.layers.Embedding(ROWS, DIM, mask_zero=mask, name="table")(
            _to_ids(source, raw)
        )
        # Mask-aware: the mask of `mask_zero` flows into the pooling.
        pooled = keras.layers.GlobalAveragePooling1D()(rows)
        out = keras.layers.Dense(1, name="head")(pooled)
        return keras.Model(raw, out)
    if shape == "two_tower":
        users, items = _input(source, "users"), _input(source, "items")
        user_table = keras.layers.Embedding(
            ROWS, DIM, mask_zero=mask, name="user_table"
        )
        item_table = keras.layers.Embedding(
            ROWS, DIM, mask_zero=mask, name="item_table"
        )
        u = keras.layers.GlobalAveragePooling1D()(
            user_table(_to_ids(source, users))
        )
        v = keras.layers.GlobalAveragePooling1D()(
            item_table(_to_ids(source, items))
        )
        out = keras.layers.Dot(axes=1)([u, v])
        return keras.Model([users, items], out)
    raise ValueError(f"Unknown shape {shape!r}; one of {SHAPES}.")


def _features(source: str, values):
    """Raw values as the model's input for `source` (NumPy)."""
    if source in ("string_lookup", "hashing", "hash_bucket_in_model"):
        return values.astype(str).astype(object)
    if source == "float_cast":
        return values.astype("float32") + 0.25
    if source == "masked":
        masked = values.copy()
        masked[:, -1] = 0  # the last position is padding
        return masked
    return values


def _first(source: str):
    values, _ = raw_data()
    x = _features(source, values[:2])
    if source == "ragged":
        return tf.RaggedTensor.from_tensor(tf.constant(x[:2]))
    return tf.constant(x)


def dataset(source: str, shape: str, batch: int = BATCH):
    """The global batches, in order, as a `tf.data.Dataset`."""
    values, y = raw_data()
    x = _features(source, values)
    if shape == "two_tower":
        x = (x, np.roll(x, 1, axis=1))
    data = tf.data.Dataset.from_tensor_slices((x, y))
    if source == "hash_bucket_in_data":
        data = data.map(
            lambda x, y: (
                tf.nest.map_structure(
                    lambda v: tf.strings.to_hash_bucket_fast(
                        tf.strings.as_string(v), ROWS
                    ),
                    x,
                ),
                y,
            )
        )
    if source == "ragged":
        # Ragged rows: each row drops its last `k` values, k = row % 3.
        data = data.enumerate().map(
            lambda i, xy: (
                tf.nest.map_structure(
                    lambda v: tf.RaggedTensor.from_tensor(
                        v[None, : SEQ - tf.cast(i % 3, tf.int32)]
                    )[0],
                    xy[0],
                ),
                xy[1],
            )
        )
        return data.ragged_batch(batch)
    return data.batch(batch)


def make_optimizer(name: str):
    if name == "sgd":
        return keras.optimizers.SGD(0.5)
    return keras.optimizers.Adam(0.05)


def reference(source: str, shape: str, opt: str, initial: list) -> list:
    """One process, the same global batches, every table gradient summed
    per id before the update (the strategy's semantics)."""
    model = build(source, shape)
    model.set_weights(initial)
    optimizer = make_optimizer(opt)
    loss_fn = keras.losses.MeanSquaredError()
    variables = model.trainable_variables
    for x, y in dataset(source, shape):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, [v.value for v in variables])
        optimizer.apply([tf.convert_to_tensor(g) for g in grads], variables)
    return model.get_weights()


def train(strategy, source: str, shape: str, opt: str) -> dict:
    """Trains one case under `strategy`; its weights before and after."""
    with strategy.scope():
        model = build(source, shape)
        model.compile(optimizer=make_optimizer(opt), loss="mse")
    initial = model.get_weights()
    model.fit(dataset(source, shape), epochs=1, verbose=0)
    plan = strategy.plan
    tables = [v.path for v in model.trainable_variables if "table" in v.path]
    return {
        "initial": initial,
        "final": model.get_weights(),
        "kinds": {p: plan[p].kind for p in tables},
    }


@contextlib.contextmanager
def emulated_hosts(path: str):
    """For the hierarchical path, this worker's job on 2 emulated hosts
    (ranks alternate between them) while the strategy is created."""
    if path != "hierarchical":
        yield
        return
    workers = len(json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"])
    old = os.environ.get(HOSTS_ENV)
    os.environ[HOSTS_ENV] = ",".join(["a", "b"] * (workers // 2))
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(HOSTS_ENV)
        else:
            os.environ[HOSTS_ENV] = old

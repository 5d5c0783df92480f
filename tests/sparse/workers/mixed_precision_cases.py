"""Models, data and optimizers of the mixed-precision tests, shared by
`mixed_precision_scenarios.py` and the tests that compute references.

Tables are float32 variables under both mixed policies; Keras' `Embedding`
(`autocast=False`) gathers float32 rows and casts its output to the compute
dtype (float16 or bfloat16). `table` reads its table with `tf.gather` in a
custom layer instead, where Keras' autocast gives rows in the compute
dtype.
"""

import keras
import numpy as np
import tensorflow as tf

VOCAB = 500
SEQ = 6
BATCH = 48  # divisible by 2 and 3: equal per-worker batches
STEPS = 20
SEED = 7
POLICIES = ("mixed_float16", "mixed_bfloat16")
MODELS = ("table", "table_mlp", "boost")
OPTIMIZERS = ("sgd", "adam")
TABLE = "table/embeddings"
# Non-finite test: at step `BOOST_STEP`, the first sample of the global
# batch (rank 0's slice for any number of workers) looks up only ids whose
# owner is the last shard for 2 and for 3 workers (p(id) % 6 == 5), and
# the gradient of its embedding output is multiplied by float16's maximum.
BOOST_STEP = 3
BOOST_IDS = (7, 11, 17, 21, 31, 41)
BOOST = 65504.0


def make_data(model_name: str, seed: int = 0):
    """Inputs and 3-class labels of `STEPS` global batches."""
    rng = np.random.default_rng(seed)
    n = STEPS * BATCH
    ranks = (rng.zipf(1.3, size=(n, SEQ)) - 1) % VOCAB
    ids = rng.permutation(VOCAB)[ranks].astype("int32")
    scores = rng.normal(size=(VOCAB, 3)).astype("float32")
    y = np.argmax(scores[ids].sum(axis=1), axis=1).astype("int32")
    if model_name != "boost":
        return ids, y
    boost = np.ones((n, 1), "float32")
    ids[BOOST_STEP * BATCH] = BOOST_IDS
    boost[BOOST_STEP * BATCH] = BOOST
    return {"ids": ids, "boost": boost}, y


class GradientBoost(keras.layers.Layer):
    """Identity forward; multiplies the gradient by a per-sample factor."""

    def call(self, x, factor):
        @tf.custom_gradient
        def boost(x):
            def grad(dy):
                return dy * tf.cast(factor[:, :, None], dy.dtype)

            return tf.identity(x), grad

        return boost(x)


class GatherTable(keras.layers.Layer):
    """A custom layer's table, read with `tf.gather` (autocast, as every
    custom layer: its rows come in the compute dtype). `rows_dtype` is the
    dtype of the rows it read in its last call."""

    def __init__(self, rows: int, width: int, **kwargs):
        super().__init__(**kwargs)
        self.rows, self.width = rows, width
        self.rows_dtype = None

    def build(self, input_shape):
        self.embeddings = self.add_weight(
            shape=(self.rows, self.width),
            name="embeddings",
            initializer="uniform",
        )

    def call(self, ids):
        rows = tf.gather(self.embeddings, ids)
        self.rows_dtype = rows.dtype.name
        return rows

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.width)


def build_model(name: str) -> keras.Model:
    """`table`: a (500, 8) `GatherTable` -> mean -> Dense(3), all under the
    global policy. `table_mlp`: Embedding(500, 16) -> mean -> Dense(32,
    relu) -> Dense(16, relu) -> Dense(3, float32 logits, as the Keras guide
    advises). `boost`: Embedding(500, 8) -> `GradientBoost` -> mean ->
    Dense(3)."""
    ids = keras.Input((SEQ,), dtype="int32", name="ids")
    inputs = ids
    if name in ("table", "boost"):
        if name == "table":
            x = GatherTable(VOCAB, 8, name="table")(ids)
        else:
            x = keras.layers.Embedding(VOCAB, 8, name="table")(ids)
            factor = keras.Input((1,), dtype="float32", name="boost")
            inputs = {"ids": ids, "boost": factor}
            x = GradientBoost(name="grad_boost")(x, factor)
        x = keras.layers.GlobalAveragePooling1D(name="pool")(x)
        outputs = keras.layers.Dense(3, name="head")(x)
    elif name == "table_mlp":
        x = keras.layers.Embedding(VOCAB, 16, name="table")(ids)
        x = keras.layers.GlobalAveragePooling1D(name="pool")(x)
        x = keras.layers.Dense(32, activation="relu", name="hidden1")(x)
        x = keras.layers.Dense(16, activation="relu", name="hidden2")(x)
        outputs = keras.layers.Dense(3, dtype="float32", name="head")(x)
    else:
        raise ValueError(f"Unknown model {name!r}; use one of {MODELS}.")
    return keras.Model(inputs, outputs, name=name)


def make_optimizer(name: str, loss_scale: dict | None = None):
    """SGD (lr 0.1) or Adam (lr 0.01). With `loss_scale` (keyword
    arguments of `LossScaleOptimizer`) wrapped explicitly; otherwise
    `compile` wraps it under `mixed_float16`."""
    if name == "sgd":
        optimizer = keras.optimizers.SGD(learning_rate=0.1)
    elif name == "adam":
        optimizer = keras.optimizers.Adam(learning_rate=0.01)
    else:
        raise ValueError(f"Unknown optimizer {name!r}; use {OPTIMIZERS}.")
    if loss_scale is None:
        return optimizer
    return keras.optimizers.LossScaleOptimizer(optimizer, **loss_scale)


def make_loss():
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def key(model: str, policy: str, optimizer: str) -> str:
    return f"{model}/{policy}/{optimizer}"

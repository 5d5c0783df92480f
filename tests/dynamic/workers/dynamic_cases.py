"""Data, models and optimizers shared by the dynamic-table workers and the
test that computes their plain-Keras reference.

Keys come from the whole int64 range, drawn Zipf-skewed from a pool, so
batches look some keys up several times, in several workers' slices.
"""

import keras
import numpy as np
import tensorflow as tf

import keras_hybrid as kh
from keras_hybrid.layers import DynamicEmbedding

SEQ, DIM = 3, 4
BATCH = 8  # global; 2 samples per worker on 4 workers
SAMPLES = 48  # 6 steps per epoch
EPOCHS = 2
CAPACITY = 64  # per worker; the pool's 30 keys fit on one worker
SEED = 11
OPTIMIZERS = ("sgd", "adam")
ADMIT_AFTER = (1, 3)
# Adam accumulating over 2 steps: the strategy needs a `HybridOptimizer`
# around it, the reference (one plain process) does not.
ACCUMULATING = ("adam_accumulating", 3)


def make_data():
    """`(keys [SAMPLES, SEQ] int64, targets [SAMPLES, 1])`."""
    rng = np.random.default_rng(SEED)
    pool = rng.integers(-(2**63), 2**63 - 1, size=30, dtype=np.int64)
    draw = np.minimum(rng.zipf(1.3, size=(SAMPLES, SEQ)) - 1, len(pool) - 1)
    targets = np.linspace(-1, 1, SAMPLES, dtype="float32")[:, None]
    return pool[draw], targets


def make_string_data():
    """`make_data` with each key spelled as a string (`"k<key>"`)."""
    keys, targets = make_data()
    return np.char.add("k", keys.astype(str)).astype(bytes), targets


def batches(keys, targets=None):
    """A `tf.data` pipeline of `BATCH` samples, in order."""
    data = keys if targets is None else (keys, targets)
    return tf.data.Dataset.from_tensor_slices(data).batch(BATCH)


# `fit`'s arguments beside the data: every epoch, batches in order.
FIT = {"batch_size": BATCH, "epochs": EPOCHS, "shuffle": False, "verbose": 0}


def make_optimizer(name: str, wrap: bool = False):
    """The optimizer `name` (`OPTIMIZERS`, or `ACCUMULATING`'s); with
    `wrap`, an accumulating one in a `HybridOptimizer`."""
    if name == "sgd":
        return keras.optimizers.SGD(0.1)
    if name == "adam":
        return keras.optimizers.Adam(0.01)
    adam = keras.optimizers.Adam(0.01, gradient_accumulation_steps=2)
    return kh.HybridOptimizer(adam) if wrap else adam


def build_model(
    admit_after: int,
    key_dtype: str = "int64",
    subclassed: bool = False,
    **layer_kwargs,
):
    """`(model, layer)`: a DynamicEmbedding (given `layer_kwargs` too),
    Flatten and Dense(1); with `subclassed`, in a `Subclassed` model, which
    `fit` builds."""
    layer = DynamicEmbedding(
        DIM,
        capacity=CAPACITY,
        admit_after=admit_after,
        name="dyn",
        **layer_kwargs,
    )
    if subclassed:
        return Subclassed(layer), layer
    keys = keras.Input(shape=(SEQ,), dtype=key_dtype)
    x = keras.layers.Flatten()(layer(keys))
    return keras.Model(keys, keras.layers.Dense(1, name="head")(x)), layer


class Subclassed(keras.Model):
    """The functional model's layers in a subclassed model, built in
    `call`: Keras' `fit` builds it by tracing `call` symbolically in a
    stateless scope, where the table is made."""

    def __init__(self, layer, **kwargs):
        super().__init__(**kwargs)
        self.dyn = layer
        self.flatten = keras.layers.Flatten()
        self.head = keras.layers.Dense(1, name="head")

    def call(self, keys):
        return self.head(self.flatten(self.dyn(keys)))


def key(optimizer: str, admit_after: int) -> str:
    return f"{optimizer}/admit_after={admit_after}"

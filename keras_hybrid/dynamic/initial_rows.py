"""`InitialRows`: each key's initial row, from the key and a seed alone."""

import math

import keras
import tensorflow as tf

from keras_hybrid.dynamic import key_hash

# Initializers whose value at an element depends on nothing but a random
# draw (no fan-in or fan-out), so a row can be drawn per key.
SUPPORTED_INITIALIZERS = (
    "Zeros",
    "Ones",
    "Constant",
    "RandomUniform",
    "RandomNormal",
    "TruncatedNormal",
)


class InitialRows:
    """Draws a row per key from a Keras initializer, keyed by the key.

    Element `j` of key `k`'s row is a function of `(k, seed, j)` only
    (splitmix64 hashes, then the initializer's inverse CDF), so every
    worker, capacity and arrival order gives the same row.

    Args:
        initializer: A Keras initializer, its name or config. One of
            `SUPPORTED_INITIALIZERS`.
        seed: Int. Mixed into every row. Defaults to `0`.

    Raises:
        NotImplementedError: For another initializer (e.g. `glorot_*`,
            whose scale depends on the table's shape).
    """

    def __init__(self, initializer, seed: int = 0):
        self.initializer = keras.initializers.get(initializer)
        kind = type(self.initializer).__name__
        if kind not in SUPPORTED_INITIALIZERS:
            raise NotImplementedError(
                "A dynamic table draws each row from its key, so its "
                "initializer must not depend on the table's shape. "
                f"Received: embeddings_initializer={kind}. Use one of "
                f"{SUPPORTED_INITIALIZERS}, e.g. "
                "keras.initializers.RandomNormal(stddev=0.05)."
            )
        self.kind = kind
        self.seed = int(seed)

    def __call__(self, keys: tf.Tensor, dim: int, dtype="float32"):
        """Rows `[len(keys), dim]` for the 1-D `keys` (int or string)."""
        config = self.initializer.get_config()
        count = tf.shape(keys)[0]
        if self.kind in ("Zeros", "Ones", "Constant"):
            value = {"Zeros": 0.0, "Ones": 1.0}.get(
                self.kind, config.get("value")
            )
            return tf.fill([count, dim], tf.cast(value, dtype))
        u = self._uniforms(keys, dim)
        if self.kind == "RandomUniform":
            low, high = config["minval"], config["maxval"]
            rows = low + (high - low) * u
        else:
            rows = config["mean"] + config["stddev"] * _normal(
                u, truncated=self.kind == "TruncatedNormal"
            )
        return tf.cast(rows, dtype)

    def _uniforms(self, keys: tf.Tensor, dim: int) -> tf.Tensor:
        row = key_hash.mix(key_hash.key_bits(keys), self.seed)
        column = tf.cast(tf.range(dim, dtype=tf.int64), tf.uint64)
        return key_hash.uniform(key_hash.mix(row[:, None], column[None, :]))


def _normal(u: tf.Tensor, truncated: bool) -> tf.Tensor:
    """Standard normal quantile of `u` (`float64`); truncated at +-2 as
    Keras' `TruncatedNormal` is."""
    if truncated:
        low = 0.5 * math.erfc(2.0 / math.sqrt(2.0))
        u = low + (1.0 - 2.0 * low) * u
    # Keep u off 0, whose quantile is -inf.
    u = tf.clip_by_value(u, 2.0**-54, 1.0 - 2.0**-53)
    return math.sqrt(2.0) * tf.math.erfinv(2.0 * u - 1.0)

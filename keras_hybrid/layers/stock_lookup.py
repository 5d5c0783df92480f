"""A stock Keras lookup and `Embedding` that read what a dynamic table
reads: what `DynamicEmbedding.static_equivalent` returns."""

import keras
import numpy as np
import tensorflow as tf

from keras_hybrid.dynamic import key_hash


def lookup_and_embedding(
    name: str,
    keys: np.ndarray,
    values: np.ndarray,
    default: np.ndarray,
    mask_zero: bool,
    key_dtype: str,
    dtype_policy,
    hashed_strings: bool = False,
    key_rank: int | None = None,
) -> keras.Sequential:
    """`IntegerLookup` or `StringLookup` over `keys` (unknown keys to the
    out-of-vocabulary index), then an `Embedding` whose rows are `default`
    and `values`.

    Args:
        name: String. The layer's name: the `Sequential`'s and its
            `Embedding`'s (the lookup is `<name>_lookup`, the hashing
            `<name>_hashing`).
        keys: Array. The live keys (int64, or bytes for string keys).
        values: Array `[len(keys), output_dim]`. Their rows.
        default: Array `[output_dim]`. The row of a key without one.
        mask_zero: Bool. Whether key 0 (or `""`) is masked.
        key_dtype: String. `"int64"` or `"string"`.
        dtype_policy: The `Embedding`'s dtype policy.
        hashed_strings: Bool. The keys are string keys' hashes
            (`key_hash.string_keys`): a `keras.layers.Hashing` layer
            hashes the strings first, and `IntegerLookup` looks them up.
        key_rank: Int or None. Rank of the keys (batch included), for the
            string input that a `Hashing` layer needs declared (without
            it, `Sequential` would feed it integers). Defaults to 2.

    Raises:
        ValueError: If there is no key (a lookup needs at least one).
    """
    mask = None
    if mask_zero:
        # The lookup puts the mask key at index 0, which the Embedding
        # masks; it reads the key's row as the dynamic layer does.
        mask = "" if key_dtype == "string" else 0
        if hashed_strings:
            mask = int(key_hash.string_keys(tf.constant([""]))[0])
        # String keys come as bytes (an object array): compare bytes.
        probe = mask.encode() if isinstance(mask, str) else mask
        at_mask = np.flatnonzero(keys == probe)
        mask_row = values[at_mask[0]] if at_mask.size else default
        keep = keys != probe
        keys, values = keys[keep], values[keep]
    if not len(keys):
        raise ValueError(
            f"{name} holds no key yet, and a stock lookup needs at least "
            "one. Train the model before converting it."
        )
    strings = key_dtype == "string" and not hashed_strings
    lookup_class = (
        keras.layers.StringLookup if strings else keras.layers.IntegerLookup
    )
    if strings:
        # Keras serializes a vocabulary of `str`, not of `bytes`.
        keys = [key.decode("utf-8") for key in keys]
    lookup = lookup_class(
        vocabulary=keys,
        num_oov_indices=1,
        mask_token=mask,
        name=f"{name}_lookup",
    )
    weights = [default, values]
    if mask_zero:
        weights = [mask_row, *weights]
    embedding = keras.layers.Embedding(
        len(weights[-1]) + len(weights) - 1,
        values.shape[-1],
        mask_zero=mask_zero,
        dtype=dtype_policy,
        name=name,
    )
    hashing = []
    if hashed_strings:
        hashing = [
            keras.Input(batch_shape=(None,) * (key_rank or 2), dtype="string"),
            keras.layers.Hashing(
                num_bins=key_hash.STRING_BINS, name=f"{name}_hashing"
            ),
        ]
    static = keras.Sequential([*hashing, lookup, embedding], name=name)
    embedding.build((None,))
    embedding.set_weights([np.vstack([np.atleast_2d(w) for w in weights])])
    return static

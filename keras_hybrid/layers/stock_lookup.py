"""A stock Keras lookup and `Embedding` that read what a dynamic table
reads: what `DynamicEmbedding.static_equivalent` returns."""

import keras
import numpy as np


def lookup_and_embedding(
    name: str,
    keys: np.ndarray,
    values: np.ndarray,
    default: np.ndarray,
    mask_zero: bool,
    key_dtype: str,
    dtype_policy,
) -> keras.Sequential:
    """`IntegerLookup` or `StringLookup` over `keys` (unknown keys to the
    out-of-vocabulary index), then an `Embedding` whose rows are `default`
    and `values`.

    Args:
        name: String. The layer's name (the `Sequential`'s).
        keys: Array. The live keys (int64, or bytes for string keys).
        values: Array `[len(keys), output_dim]`. Their rows.
        default: Array `[output_dim]`. The row of a key without one.
        mask_zero: Bool. Whether key 0 (or `""`) is masked.
        key_dtype: String. `"int64"` or `"string"`.
        dtype_policy: The `Embedding`'s dtype policy.

    Raises:
        ValueError: If there is no key (a lookup needs at least one).
    """
    mask = None
    if mask_zero:
        # The lookup puts the mask key at index 0, which the Embedding
        # masks; it reads the key's row as the dynamic layer does.
        mask = "" if key_dtype == "string" else 0
        at_mask = np.flatnonzero(keys == np.asarray(mask, keys.dtype))
        mask_row = values[at_mask[0]] if at_mask.size else default
        keep = keys != np.asarray(mask, keys.dtype)
        keys, values = keys[keep], values[keep]
    if not len(keys):
        raise ValueError(
            f"{name} holds no key yet, and a stock lookup needs at least "
            "one. Train the model before converting it."
        )
    lookup_class = (
        keras.layers.StringLookup
        if key_dtype == "string"
        else keras.layers.IntegerLookup
    )
    if key_dtype == "string":
        # Keras serializes a vocabulary of `str`, not of `bytes`.
        keys = [key.decode("utf-8") for key in keys]
    lookup = lookup_class(vocabulary=keys, num_oov_indices=1, mask_token=mask)
    weights = [default, values]
    if mask_zero:
        weights = [mask_row, *weights]
    embedding = keras.layers.Embedding(
        len(weights[-1]) + len(weights) - 1,
        values.shape[-1],
        mask_zero=mask_zero,
        dtype=dtype_policy,
    )
    static = keras.Sequential([lookup, embedding], name=name)
    embedding.build((None,))
    embedding.set_weights([np.vstack([np.atleast_2d(w) for w in weights])])
    return static

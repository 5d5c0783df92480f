"""A `DynamicEmbedding`'s keys in Keras' weight stores (`.keras` and
`.weights.h5` files), beside its variables.

Keras' stores take numeric arrays only, so string keys are stored as
their bytes, one after the other, and their lengths. Under
`HybridStrategy` a table holds string keys as their hashes (int64); such
weights carry a flag, and a layer that keeps the strings themselves (no
strategy) refuses them, and the other way round: a hash cannot be turned
back into its string.
"""

import numpy as np

# The store's entries besides the layer's variables.
KEYS = "slot_keys"
LENGTHS = "slot_key_lengths"
HASHED = "string_keys_hashed"
NAMES = (KEYS, LENGTHS, HASHED)


def save(store, keys: np.ndarray, hashed_strings: bool) -> None:
    """Writes the table's `keys` (int64, or bytes objects) to `store`."""
    if hashed_strings:
        store[HASHED] = np.array(1)
    if keys.dtype == object:
        store[LENGTHS] = np.array([len(k) for k in keys])
        store[KEYS] = np.frombuffer(b"".join(keys), np.uint8)
    else:
        store[KEYS] = keys


def load(store, name: str, strings: bool, hashed_strings: bool) -> np.ndarray:
    """The keys in `store`, for a layer named `name` whose table keeps
    `strings` (bytes objects) or int64 keys, its string keys as hashes if
    `hashed_strings`.

    Raises:
        ValueError: If the store holds string keys in the other form.
    """
    saved_hashed = HASHED in store.keys()
    if saved_hashed != hashed_strings and (strings or hashed_strings):
        held, here = (
            ("their hashes (saved under HybridStrategy)", "the strings")
            if saved_hashed
            else ("strings (saved without a strategy)", "their hashes")
        )
        raise ValueError(
            f"DynamicEmbedding '{name}' cannot load these weights: they hold "
            f"string keys as {held}, and this layer keeps {here}. Load them "
            "where they were saved, or resume a HybridStrategy run with "
            "`keras_hybrid.callbacks.ShardedCheckpoint`."
        )
    keys = np.asarray(store[KEYS])
    if not strings:
        return keys
    lengths = np.asarray(store[LENGTHS])
    ends = np.cumsum(lengths)
    starts = ends - lengths
    data = keys.tobytes()
    return np.array(
        [data[a:e] for a, e in zip(starts, ends, strict=True)], dtype=object
    )

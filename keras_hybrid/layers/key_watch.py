"""The keys that `DynamicEmbedding` layers look up in eager calls, for a
tool that watches them.

The simulator's profiler counts a dynamic table's unique keys per batch
where its exchange moves them: at the layer's input, admitted or not. The
table's gradient holds only the rows of admitted keys.
"""

import contextlib

import numpy as np
import tensorflow as tf

_watchers: list = []


@contextlib.contextmanager
def watching():
    """Within this context, yields `{layer: [keys arrays]}`, filled by the
    eager calls of `DynamicEmbedding` layers (keys flattened, as int64 or
    bytes)."""
    seen: dict = {}
    _watchers.append(seen)
    try:
        yield seen
    finally:
        _watchers.remove(seen)


def saw(layer, keys) -> None:
    """Records `keys` that `layer` looks up, if anything watches."""
    if not _watchers or not tf.executing_eagerly():
        return
    value = np.asarray(keys).reshape(-1)
    for seen in _watchers:
        seen.setdefault(layer, []).append(value)

"""Instance keys that every worker derives alike, whatever it traced.

A V2 collective meets its peers by instance key. Keys handed out by a
counter at trace time deadlock as soon as one worker traces a function the
others do not (a rank-only retrace for a partial batch). Here a key is a
hash of *what* is exchanged (the purpose, dtypes and shapes), plus the
number of earlier requests for the same content in the same graph, plus a
capacity bucket for variable-sized exchanges. Two workers running the same
collective thus agree on its key by construction.
"""

import hashlib
import threading
import weakref

import tensorflow as tf

from keras_hybrid.comm import capacity

_BUCKET_SLOTS = 512  # >= ladder.NUM_BUCKETS
_HASH_SPACE = (1 << 30) // _BUCKET_SLOTS


class InstanceKeys:
    """Derives instance keys from the content of a collective."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # graph -> {content: occurrences}; eager code uses the key None.
        self._seen = weakref.WeakKeyDictionary()
        self._eager_seen: dict[str, int] = {}

    def base_key(self, content: str) -> int:
        """Returns a key for `content`, unique within the current graph."""
        graph = None
        if not tf.executing_eagerly():
            graph = tf.compat.v1.get_default_graph()
        with self._lock:
            if graph is None:
                # Eager collectives finish before the next one starts, so
                # the same content may reuse its key.
                occurrence = 0
            else:
                seen = self._seen.setdefault(graph, {})
                occurrence = seen.get(content, 0)
                seen[content] = occurrence + 1
        digest = hashlib.sha256(f"{content}#{occurrence}".encode()).digest()
        # Key 0 is avoided; keys of one content are a block of bucket slots.
        return (int.from_bytes(digest[:8], "big") % (_HASH_SPACE - 1) + 1) * (
            _BUCKET_SLOTS
        )

    def bucketed_key(self, base: int, count: tf.Tensor) -> tuple:
        """Returns `(instance_key, capacity)` for a variable-sized payload."""
        index = capacity.bucket_index(count)
        return base + index, capacity.bucket_capacity(index)


def describe(tensors, rows_vary: bool = False) -> str:
    """A short, rank-independent description of tensors' dtypes/shapes.

    With `rows_vary`, the first dimension is left out: it may differ between
    workers (and between traces), so it must not enter the key.
    """
    parts = []
    for t in tensors:
        dims = list(t.shape)[1:] if rows_vary else list(t.shape)
        shape = "x".join("?" if d is None else str(d) for d in dims)
        parts.append(f"{t.dtype.name}[{shape}]")
    return ",".join(parts)

"""`Eviction`: which rows of a full dynamic table give way to new keys."""

import dataclasses

import tensorflow as tf

# What `DynamicEmbedding(eviction=...)` accepts; "ttl" is written
# "ttl:<steps>".
EVICTIONS = ("lfu", "lru", "ttl")
# A score no live row has: rows that must stay.
_KEEP = tf.int64.max


@dataclasses.dataclass(frozen=True)
class Eviction:
    """An eviction policy, parsed from the layer's `eviction` argument.

    Attributes:
        kind: String or None. `"lfu"` (fewest lookups first), `"lru"`
            (longest unused first), `"ttl"` (rows unused for more than
            `ttl` steps expire) or None (no eviction: a full table admits
            no new key).
        ttl: Int. Steps a row may go unused under `"ttl"`, else 0.
    """

    kind: str | None = None
    ttl: int = 0

    @classmethod
    def parse(cls, eviction: str | None) -> "Eviction":
        """`Eviction` from `None`, `"lfu"`, `"lru"` or `"ttl:<steps>"`.

        Raises:
            ValueError: For any other value.
        """
        if eviction is None:
            return cls()
        if not isinstance(eviction, str):
            raise TypeError(
                "`eviction` must be a string or None. Received: "
                f"eviction={eviction!r}."
            )
        kind, _, steps = eviction.partition(":")
        if kind in ("lfu", "lru") and not steps:
            return cls(kind)
        if kind == "ttl" and steps.isdigit() and int(steps) > 0:
            return cls(kind, int(steps))
        raise ValueError(
            f"`eviction` must be None or one of {EVICTIONS} (`ttl` as "
            f'"ttl:<steps>", steps > 0, e.g. "ttl:1000"). Received: '
            f"eviction={eviction!r}."
        )

    def __str__(self) -> str:
        return f"ttl:{self.ttl}" if self.kind == "ttl" else str(self.kind)

    @property
    def makes_room(self) -> bool:
        """Whether a full table evicts rows to admit new keys."""
        return self.kind in ("lfu", "lru")

    def expired(self, last_step: tf.Tensor, step: tf.Tensor) -> tf.Tensor:
        """Bool per row: unused for more than `ttl` steps (`"ttl"` only)."""
        if self.kind != "ttl":
            return tf.zeros_like(last_step, tf.bool)
        return last_step < step - self.ttl

    def victims(self, count, live, protected, uses, last_step):
        """Up to `count` rows to evict, lowest score first (ties: lowest
        row). `live` and `protected` are bool per row; protected rows
        (read in this step) are never chosen, so fewer may come back."""
        score = uses if self.kind == "lfu" else last_step
        score = tf.where(live & ~protected, score, _KEEP)
        count = tf.minimum(tf.cast(count, tf.int32), tf.size(score))
        low, rows = tf.math.top_k(-score, k=count)
        return tf.boolean_mask(rows, -low < _KEEP)

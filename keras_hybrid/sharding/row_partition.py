"""`RowPartition`: which shard owns each row of a table, and where.

Plain NumPy for the cost library and the launcher's tools; ids given as
tensors (inside a step) get graph ops. TensorFlow is looked up, not
imported: a tensor argument means the caller has imported it.
"""

import dataclasses
import functools
import math
import sys

import numpy as np

from keras_hybrid.sharding.shard_assignment import ShardAssignment

_GOLDEN = (math.sqrt(5) - 1) / 2


def _tf_for(value):
    """TensorFlow if `value` is a tensor, else None (never imports it)."""
    tf = sys.modules.get("tensorflow")
    return tf if tf is not None and tf.is_tensor(value) else None


# Virtual shards of a table with at least this many rows. Fixed, so a row's
# virtual shard never depends on the number of workers: per worker the
# imbalance is at most one virtual shard (0.1% of the table) and a resize
# moves within a few per mille of the least it could; the lookup table of
# a step is 1024 ints.
VIRTUAL_SHARDS = 1024


@dataclasses.dataclass(frozen=True)
class RowPartition:
    """Maps the rows of a `num_rows` table onto `num_shards` shards.

    Rows are not split into contiguous ranges: ids of real vocabularies are
    skewed (frequent words and items have small ids), so ranges would send
    most lookups to shard 0. Instead a fixed bijection of `[0, num_rows)`,
    `p(id) = (multiplier * id + offset) mod num_rows`, scatters the ids
    over `V` *virtual shards*: row `id` is in virtual shard `p(id) % V`, at
    position `p(id) // V` in it. `V = min(VIRTUAL_SHARDS, num_rows)` (at
    least `num_shards`) depends on the table only, so a row's virtual shard
    never changes. `assignment` (a `ShardAssignment`) puts each virtual
    shard on a worker; a shard stores its virtual shards one after the
    other in ascending order, so the local index of a row is the offset of
    its virtual shard in that storage plus `p(id) // V`. A resize changes
    the assignment only (`resized`), and virtual shards move whole.

    A partition saved before virtual shards existed (no `assignment` in
    its config) reads as `V = num_shards` with virtual shard `s` on shard
    `s`, which is the layout it was written with: `p(id) % num_shards`,
    at local index `p(id) // num_shards`.

    Args:
        num_rows: Int. Rows of the full table.
        num_shards: Int. Shards (workers) the rows are spread over.
        multiplier: Int. Of the bijection, coprime with `num_rows`.
        offset: Int. Of the bijection.
        assignment: `ShardAssignment` of the virtual shards, or `None` for
            the layout without virtual shards.

    Example:

    ```python
    part = RowPartition.create(num_rows=100_000, num_shards=4)
    part.shard_of(np.array([0, 1, 2, 3]))     # four different shards
    part.rows_on_shard(0)                      # 25_000
    grown = part.resized(5)                    # 20% of the rows move
    ```

    Raises:
        ValueError: If `num_rows` or `num_shards` is not positive, or there
            are more shards than rows.
    """

    num_rows: int
    num_shards: int
    multiplier: int
    offset: int
    assignment: ShardAssignment | None = None

    def __post_init__(self) -> None:
        if (
            self.assignment is not None
            and self.assignment.num_workers != self.num_shards
        ):
            raise ValueError(
                "`num_shards` must be the assignment's `num_workers`. "
                f"Received: num_shards={self.num_shards} with an assignment "
                f"onto {self.assignment.num_workers} workers."
            )

    @classmethod
    def create(cls, num_rows: int, num_shards: int) -> "RowPartition":
        """Builds the partition of `num_rows` rows over `num_shards`, with
        a balanced assignment of its virtual shards."""
        for name, value in (("num_rows", num_rows), ("num_shards", num_shards)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(
                    f"`{name}` must be an int. Received: {name}={value!r}"
                )
            if value < 1:
                raise ValueError(
                    f"`{name}` must be >= 1. Received: {name}={value}"
                )
        if num_shards > num_rows:
            raise ValueError(
                "`num_shards` must be <= `num_rows`, or some shards would "
                f"own no rows. Received: num_shards={num_shards} with "
                f"num_rows={num_rows}."
            )
        multiplier = max(1, int(_GOLDEN * num_rows)) | 1
        while math.gcd(multiplier, num_rows) != 1:
            multiplier += 2
        num_virtual = max(min(VIRTUAL_SHARDS, num_rows), num_shards)
        return cls(
            num_rows,
            num_shards,
            multiplier % num_rows or 1,
            offset=num_rows // 3,
            assignment=ShardAssignment.balanced(num_virtual, num_shards),
        )

    def resized(self, num_shards: int) -> "RowPartition":
        """This partition with its virtual shards re-balanced onto
        `num_shards` workers, moving as few as the balance needs (see
        `ShardAssignment.resized`)."""
        return self.with_assignment(self.virtual.resized(num_shards))

    def with_assignment(self, assignment: ShardAssignment) -> "RowPartition":
        """This partition with another assignment of its virtual shards.

        Raises:
            ValueError: If `assignment` has another number of virtual
                shards.
        """
        if assignment.num_virtual != self.num_virtual:
            raise ValueError(
                "The assignment must have the partition's "
                f"{self.num_virtual} virtual shards. Received: "
                f"{assignment.num_virtual}."
            )
        return dataclasses.replace(
            self, num_shards=assignment.num_workers, assignment=assignment
        )

    # -- virtual shards

    @functools.cached_property
    def virtual(self) -> ShardAssignment:
        """The assignment of virtual shards (explicit for old layouts)."""
        if self.assignment is not None:
            return self.assignment
        return ShardAssignment(tuple(range(self.num_shards)), self.num_shards)

    @property
    def num_virtual(self) -> int:
        return self.virtual.num_virtual

    @functools.cached_property
    def virtual_rows(self) -> np.ndarray:
        """Rows in each virtual shard (int64, shape `[V]`)."""
        v = np.arange(self.num_virtual, dtype=np.int64)
        return (self.num_rows - v + self.num_virtual - 1) // self.num_virtual

    @functools.cached_property
    def _owners(self) -> np.ndarray:
        return np.asarray(self.virtual.owners, dtype=np.int64)

    @functools.cached_property
    def virtual_offsets(self) -> np.ndarray:
        """Where each virtual shard starts in its owner's storage."""
        offsets = np.zeros(self.num_virtual, dtype=np.int64)
        for shard in range(self.num_shards):
            mine = self.virtual.shards_of(shard)
            rows = self.virtual_rows[mine]
            offsets[mine] = np.cumsum(rows) - rows
        return offsets

    # -- rows

    def _permute(self, ids):
        return (ids * self.multiplier + self.offset) % self.num_rows

    def virtual_shard_of(self, ids):
        """Virtual shard of each id (NumPy array or int64 tensor)."""
        return self._permute(ids) % self.num_virtual

    def shard_of(self, ids):
        """Shard owning each id (NumPy array or int64 tensor)."""
        virtual = self.virtual_shard_of(ids)
        tf = _tf_for(virtual)
        if tf is not None:
            return tf.gather(tf.constant(self._owners), virtual)
        return self._owners[virtual]

    def local_index(self, ids):
        """Row index of each id inside its shard (NumPy array or int64
        tensor); inside a step, a gather from a `[V]` constant."""
        permuted = self._permute(ids)
        virtual = permuted % self.num_virtual
        within = permuted // self.num_virtual
        tf = _tf_for(permuted)
        if tf is not None:
            offsets = tf.constant(self.virtual_offsets)
            return tf.gather(offsets, virtual) + within
        return self.virtual_offsets[virtual] + within

    @functools.cached_property
    def _shard_rows(self) -> np.ndarray:
        return np.bincount(
            self._owners, weights=self.virtual_rows, minlength=self.num_shards
        ).astype(np.int64)

    def rows_on_shard(self, shard: int) -> int:
        """Number of rows shard `shard` stores (0 for a worker beyond
        `num_shards`, e.g. one that joins in a resize)."""
        if shard >= self.num_shards:
            return 0
        return int(self._shard_rows[shard])

    def ids_of_virtual(self, virtual: int) -> np.ndarray:
        """Global ids of virtual shard `virtual`, in storage order."""
        permuted = np.arange(
            virtual, self.num_rows, self.num_virtual, dtype=np.int64
        )
        inverse = pow(self.multiplier, -1, self.num_rows)
        return ((permuted - self.offset) * inverse) % self.num_rows

    def ids_on_shard(self, shard: int) -> np.ndarray:
        """Global ids stored by `shard`, in local-index order (int64)."""
        parts = [self.ids_of_virtual(v) for v in self.virtual.shards_of(shard)]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def shard_of_tensor(self, ids):
        """`shard_of` for a tensor of ids, as int32."""
        import tensorflow as tf  # only tensor callers pay for it

        return tf.cast(self.shard_of(tf.cast(ids, tf.int64)), tf.int32)

    def get_config(self) -> dict:
        config = {
            "num_rows": self.num_rows,
            "num_shards": self.num_shards,
            "multiplier": self.multiplier,
            "offset": self.offset,
        }
        if self.assignment is not None:
            config["assignment"] = self.assignment.get_config()
        return config

    @classmethod
    def from_config(cls, config: dict) -> "RowPartition":
        config = dict(config)
        if config.get("assignment") is not None:
            config["assignment"] = ShardAssignment.from_config(
                config["assignment"]
            )
        return cls(**config)

"""`RowPartition`: which shard owns each row of a table, and where."""

import dataclasses
import math

import numpy as np
import tensorflow as tf

_GOLDEN = (math.sqrt(5) - 1) / 2


@dataclasses.dataclass(frozen=True)
class RowPartition:
    """Maps the rows of a `num_rows` table onto `num_shards` shards.

    Rows are not split into contiguous ranges: ids of real vocabularies are
    skewed (frequent words and items have small ids), so ranges would send
    most lookups to shard 0. Instead a fixed bijection of `[0, num_rows)`,
    `p(id) = (multiplier * id + offset) mod num_rows`, scatters the ids, and
    shard `p(id) % num_shards` stores the row at local index
    `p(id) // num_shards`. The bijection depends on `num_rows` only, so a
    row's identity (and its initial value) does not change with the number
    of shards.

    Args:
        num_rows: Int. Rows of the full table.
        num_shards: Int. Shards the rows are spread over.

    Example:

    ```python
    part = RowPartition.create(num_rows=100_000, num_shards=4)
    part.shard_of(np.array([0, 1, 2, 3]))     # four different shards
    part.rows_on_shard(0)                      # 25_000
    ```

    Raises:
        ValueError: If `num_rows` or `num_shards` is not positive, or there
            are more shards than rows.
    """

    num_rows: int
    num_shards: int
    multiplier: int
    offset: int

    @classmethod
    def create(cls, num_rows: int, num_shards: int) -> "RowPartition":
        """Builds the partition of `num_rows` rows over `num_shards`."""
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
        return cls(
            num_rows,
            num_shards,
            multiplier % num_rows or 1,
            offset=num_rows // 3,
        )

    def _permute(self, ids):
        return (ids * self.multiplier + self.offset) % self.num_rows

    def shard_of(self, ids):
        """Shard owning each id (NumPy array or int64 tensor)."""
        return self._permute(ids) % self.num_shards

    def local_index(self, ids):
        """Row index of each id inside its shard."""
        return self._permute(ids) // self.num_shards

    def rows_on_shard(self, shard: int) -> int:
        """Number of rows shard `shard` stores."""
        return (self.num_rows - shard + self.num_shards - 1) // self.num_shards

    def ids_on_shard(self, shard: int) -> np.ndarray:
        """Global ids stored by `shard`, in local-index order (int64)."""
        permuted = np.arange(
            shard, self.num_rows, self.num_shards, dtype=np.int64
        )
        inverse = pow(self.multiplier, -1, self.num_rows)
        return ((permuted - self.offset) * inverse) % self.num_rows

    def shard_of_tensor(self, ids: tf.Tensor) -> tf.Tensor:
        """`shard_of` for a tensor of ids, as int32."""
        return tf.cast(self.shard_of(tf.cast(ids, tf.int64)), tf.int32)

    def get_config(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_config(cls, config: dict) -> "RowPartition":
        return cls(**config)

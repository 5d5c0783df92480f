"""`KeyOwners`: which worker holds the row of each key of a dynamic table.

A key's 64 bits, hashed (`key_hash.mix` with a salt of its own, so that
the shard says nothing of the key's initial row), pick one of
`num_virtual` virtual shards; a `ShardAssignment` maps the virtual shards
onto workers. The virtual shard of a key depends on the key alone, never
on the worker count, so a resize would move whole virtual shards, as it
does for static tables (`sharding.RowPartition`).
"""

import dataclasses

import numpy as np
import tensorflow as tf

from keras_hybrid.dynamic import key_hash
from keras_hybrid.sharding.shard_assignment import ShardAssignment

# Virtual shards of a dynamic table, as for a static table of >= 1024 rows.
NUM_VIRTUAL = 1024
# Salt of the shard hash; initial rows are salted with the layer's seed.
_SHARD_SALT = 0x6B65797368617264  # "keyshard"


@dataclasses.dataclass(frozen=True)
class KeyOwners:
    """Maps keys to virtual shards, and virtual shards to workers.

    Args:
        assignment: `ShardAssignment` of the virtual shards.

    ```python
    owners = KeyOwners.balanced(num_workers=4)
    owners.owner_of(tf.constant([7, -3], tf.int64))  # int32 ranks
    ```
    """

    assignment: ShardAssignment

    @classmethod
    def balanced(
        cls, num_workers: int, num_virtual: int = NUM_VIRTUAL
    ) -> "KeyOwners":
        """Virtual shard `v` on worker `v % num_workers`."""
        return cls(ShardAssignment.balanced(num_virtual, num_workers))

    @property
    def num_virtual(self) -> int:
        return self.assignment.num_virtual

    def virtual_shard_of(self, keys: tf.Tensor) -> tf.Tensor:
        """Virtual shard (int32) of each of the 1-D `keys` (int or
        string)."""
        bits = key_hash.mix(key_hash.key_bits(keys), _SHARD_SALT)
        virtual = tf.math.floormod(
            bits, tf.constant(self.num_virtual, tf.uint64)
        )
        return tf.cast(virtual, tf.int32)

    def owner_of(self, keys: tf.Tensor) -> tf.Tensor:
        """Rank (int32) of the worker holding each of the 1-D `keys`."""
        owners = tf.constant(np.asarray(self.assignment.owners, np.int32))
        return tf.gather(owners, self.virtual_shard_of(keys))

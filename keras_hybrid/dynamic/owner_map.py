"""`OwnerMap`: the owners of a dynamic table's keys, as traced steps read
them.

A key's virtual shard never changes (`KeyOwners`); what an elastic resize
changes is which worker holds each virtual shard. The step that
exchanges keys (`key_exchange`) reads that map from a `[V]` int32
variable, so a resize sets the variable and the traced step runs on
unchanged, as a static table's `PartitionLookup` does.
"""

import numpy as np
import tensorflow as tf

from keras_hybrid._compat import tf as tf_compat
from keras_hybrid.dynamic.key_owners import KeyOwners
from keras_hybrid.sharding.shard_assignment import ShardAssignment


class OwnerMap:
    """Owner (a rank) of each virtual shard of a dynamic table's keys.

    Args:
        owners: `KeyOwners`. The assignment the map starts with.
        name: String. Prefix of the variable's name.

    ```python
    owners = OwnerMap(KeyOwners.balanced(2), "dyn")
    owners.owner_of(tf.constant([7, -3], tf.int64))  # int32 ranks
    owners.update(owners.assignment.resized(3))       # no re-trace
    ```
    """

    def __init__(self, owners: KeyOwners, name: str) -> None:
        self.key_owners = owners
        # Made outside any trace and past the strategy's variable
        # creator: the strategy must not broadcast or partition it.
        with tf.init_scope():
            self.variable = tf_compat.plain_variable(
                _owners(owners.assignment),
                name=f"{name}/key_owners",
                trainable=False,
            )

    @property
    def assignment(self) -> ShardAssignment:
        """`ShardAssignment` of the virtual shards now."""
        return self.key_owners.assignment

    @property
    def num_virtual(self) -> int:
        return self.key_owners.num_virtual

    def virtual_shard_of(self, keys: tf.Tensor) -> tf.Tensor:
        """Virtual shard (int32) of each of the 1-D `keys`."""
        return self.key_owners.virtual_shard_of(keys)

    def owner_of(self, keys: tf.Tensor) -> tf.Tensor:
        """Rank (int32) of the worker holding each of the 1-D `keys`, read
        from the variable when the step runs."""
        return tf.gather(self.variable, self.virtual_shard_of(keys))

    def update(self, assignment: ShardAssignment) -> None:
        """Makes the map follow `assignment` (same virtual shards).

        Adds the difference instead of assigning: on TF 2.21 `assign` to
        a variable made before an eager context reset (a lost worker's
        recovery) does nothing, `assign_add` still works.

        Raises:
            ValueError: If `assignment` has another number of virtual
                shards.
        """
        if assignment.num_virtual != self.num_virtual:
            raise ValueError(
                "A dynamic table's owners keep its "
                f"{self.num_virtual} virtual shards. Received: an "
                f"assignment of {assignment.num_virtual}."
            )
        with tf.init_scope():
            delta = _owners(assignment) - self.variable.numpy()
            if delta.any():
                self.variable.assign_add(delta)
        self.key_owners = KeyOwners(assignment)


def _owners(assignment: ShardAssignment) -> np.ndarray:
    return np.asarray(assignment.owners, np.int32)

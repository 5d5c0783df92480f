"""`PartitionLookup`: a table's virtual-shard map, as traced steps read it.

A traced step that looks up a partitioned table needs, per id, the shard
that owns it and its row in that shard's storage (`RowPartition`). The
bijection and the virtual shard of an id never change; what a resize
changes is the assignment: per virtual shard, its owner and where it
starts in its owner's storage. Here those two `[V]` vectors live in
non-trainable variables that the step reads, so a resize assigns them
and the traced step runs on unchanged (no re-trace).
"""

import numpy as np
import tensorflow as tf

from keras_hybrid._compat import tf as tf_compat


class PartitionLookup:
    """Owner and storage offset of each virtual shard, in variables.

    Args:
        partition: `RowPartition`. The layout the variables start with.
        name: String. Prefix of the variables' names.

    Example:

    ```python
    lookup = PartitionLookup(RowPartition.create(1000, 2), "items")
    lookup.shard_of(tf.constant([3, 4], tf.int64))     # owners, int32
    lookup.update(partition.resized(3))                # no re-trace
    ```
    """

    def __init__(self, partition, name: str) -> None:
        self._fixed = _fixed_part(partition)
        # Built outside any trace, and past the strategy's variable
        # creator: the strategy must not broadcast or partition them.
        with tf.init_scope():
            self.owners = tf_compat.plain_variable(
                _owners(partition), name=f"{name}/owners", trainable=False
            )
            self.offsets = tf_compat.plain_variable(
                partition.virtual_offsets,
                name=f"{name}/offsets",
                trainable=False,
            )

    def update(self, partition) -> None:
        """Makes the variables follow `partition` (same bijection and
        virtual shards, any assignment).

        Adds the difference instead of assigning: on TF 2.21 `assign` to a
        variable made before an eager context reset (a lost worker's
        recovery) does nothing, `assign_add` still works.

        Raises:
            ValueError: If `partition` has another bijection or number of
                virtual shards.
        """
        if _fixed_part(partition) != self._fixed:
            raise ValueError(
                "A table's new partition must keep its rows, bijection and "
                f"virtual shards {self._fixed}. Received: "
                f"{_fixed_part(partition)}."
            )
        with tf.init_scope():
            for variable, value in (
                (self.owners, _owners(partition)),
                (self.offsets, partition.virtual_offsets),
            ):
                delta = value - variable.numpy()
                if delta.any():
                    variable.assign_add(delta)

    def _virtual_and_within(self, ids: tf.Tensor) -> tuple:
        num_rows, multiplier, offset, num_virtual = self._fixed
        permuted = (tf.cast(ids, tf.int64) * multiplier + offset) % num_rows
        return permuted % num_virtual, permuted // num_virtual

    def shard_of(self, ids: tf.Tensor) -> tf.Tensor:
        """Shard owning each id, int32, read from the variables."""
        virtual, _ = self._virtual_and_within(ids)
        return tf.gather(self.owners, virtual)

    def local_index(self, ids: tf.Tensor) -> tf.Tensor:
        """Row of each id in its owner's storage, int64."""
        virtual, within = self._virtual_and_within(ids)
        return tf.gather(self.offsets, virtual) + within


def _fixed_part(partition) -> tuple:
    """What a resize never changes: rows, bijection, virtual shards."""
    return (
        partition.num_rows,
        partition.multiplier,
        partition.offset,
        partition.num_virtual,
    )


def _owners(partition) -> np.ndarray:
    return np.asarray(partition.virtual.owners, np.int32)

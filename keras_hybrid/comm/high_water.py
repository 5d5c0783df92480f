"""`HighWaterMarks`: per-key row counts that only grow, for collectives
whose input should keep its shape from step to step.

Horovod caches the negotiated response of each collective by its name and
input shape; an input whose rows change every step misses that cache and
takes the slow path in Horovod's background cycle (`stable_alltoall`).
Padding the rows up to the largest count seen so far, on the capacity
ladder (`comm.capacity`), keeps the shape still once the largest step has
been seen.

A mark is a `tf.Variable` made eagerly (`tf.init_scope`) the first time
its key is asked for, so a key first used while a step is traced works.
"""

import re

import tensorflow as tf

from keras_hybrid.comm import capacity


class HighWaterMarks:
    """Row counts per key: the ladder capacity of the largest seen.

    Args:
        prefix: String. Names the variables (`{prefix}_{key}`).
        keys: Tuple of strings made at once; others are made when first
            asked for.
    """

    def __init__(self, prefix: str, keys: tuple = ()) -> None:
        self._prefix = prefix
        self._marks = {}
        for key in keys:
            self._mark(key)

    def capacity(self, key: str, rows) -> tf.Tensor:
        """Rows to send for `key`: its mark, raised to the ladder capacity
        of `rows` when they exceed it (int32 scalar)."""
        mark = self._mark(key)
        cap = tf.maximum(mark.read_value(), capacity.capacity_for(rows))
        with tf.control_dependencies([mark.assign(cap)]):
            return tf.identity(cap)

    def _mark(self, key: str) -> tf.Variable:
        if key not in self._marks:
            name = re.sub(r"[^A-Za-z0-9_]", "_", f"{self._prefix}_{key}")
            with tf.init_scope():
                self._marks[key] = tf.Variable(
                    0, dtype=tf.int32, trainable=False, name=name
                )
        return self._marks[key]

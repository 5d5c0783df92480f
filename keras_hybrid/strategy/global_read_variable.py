"""Sync-on-read variables (Keras metric state) with global reads.

A `ResourceVariable` (through `_compat.tf.ConvertibleVariable`) whose
public `value()`/`read_value()`, which tensor conversion goes through, are
overridden.

Keras keeps metric state (`total`, `count`, confusion counts) in variables
with `synchronization="on_read"`. Each worker adds its own batches to its
own copy. Inside the replica step, reads are local: Keras updates metrics
by read-modify-write (`assign(self + value)`), so a global read there would
count other workers' state again. Everywhere else (epoch-end logs, the
return of `evaluate`, callbacks) a read returns the value reduced over all
workers, so every rank sees the same, exact global metric.
"""

import tensorflow as tf

from keras_hybrid._compat import tf as tf_compat
from keras_hybrid.utils.thread_flag import ThreadFlag

_local_reads = ThreadFlag()


def local_reads():
    """Within this context, global-read variables read this worker's copy.

    The replica step runs in it. Use it too where only some ranks read
    (saving on the chief): a global read is a collective that every worker
    must join.
    """
    return _local_reads.scope()


class GlobalReadVariable(tf_compat.ConvertibleVariable):
    """A variable whose reads outside the replica step are global."""

    def __init__(self, communicator, reduce_op: str, **kwargs) -> None:
        self._communicator = communicator
        self._reduce_op = reduce_op
        super().__init__(**kwargs)

    @property
    def reduce_op(self) -> str:
        """String. `"sum"` or `"mean"`: how worker copies combine."""
        return self._reduce_op

    def _global(self, value: tf.Tensor) -> tf.Tensor:
        if self._communicator.size == 1 or bool(_local_reads):
            return value
        (reduced,) = self._communicator.all_reduce(
            [value], op=self._reduce_op, path="control"
        )
        return reduced

    def value(self):
        return self._global(super().value())

    def read_value(self):
        return self._global(super().read_value())

    def __repr__(self) -> str:
        # The base repr reads the value, which would be a collective.
        return (
            f"<GlobalReadVariable '{self.name}' shape={self.shape} "
            f"dtype={self.dtype.name}>"
        )

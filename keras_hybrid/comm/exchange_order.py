"""`ExchangeOrder`: makes a traced step's dense all-reduce start after the
pairwise all-to-alls traced before it in the same graph.

With the all-to-all in rounds (one sender per receiver at a time), a ring
all-reduce running beside it would be a second flow into every receiver
and overflow shallow buffers again; run one after the other, each link
carries one flow at a time and the same bytes. An all-to-all traced
before the all-reduce cannot depend on it, so the wait adds no cycle.
"""

import weakref

import tensorflow as tf


class ExchangeOrder:
    """Per graph, the last ops of the last pairwise all-to-all traced.

    Op names, not ops, are kept: a value holding the graph would keep
    the weak key (the graph) alive for the life of the process.
    """

    def __init__(self) -> None:
        self._last: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def record(self, tensors: list) -> None:
        """Remembers `tensors`' ops as the current graph's last exchange
        (nothing eagerly)."""
        if tensors and not tf.executing_eagerly():
            graph = tf.compat.v1.get_default_graph()
            self._last[graph] = [t.op.name for t in tensors]

    def waits(self) -> list:
        """The ops a collective traced now in this graph should wait for:
        the last exchange's, or none."""
        if tf.executing_eagerly():
            return []
        graph = tf.compat.v1.get_default_graph()
        names = self._last.get(graph, [])
        return [graph.get_operation_by_name(name) for name in names]

"""Byte and call counters for every collective, by traffic path."""

import tensorflow as tf

# Traffic paths a collective can be charged to. `dense` is gradient and
# weight all-reduce, `sparse_*` the parameter-server exchange, `ids` the row
# ids that travel with sparse rows, `padding` the bytes sent only to keep
# collective shapes fixed, `control` small bookkeeping (metrics, capacities,
# broadcasts of initial values).
PATHS = ("dense", "sparse_pull", "sparse_push", "ids", "padding", "control")


class CommStats:
    """Counts bytes sent and collectives issued per path.

    The counters are `tf.Variable`s so that collectives traced inside a
    `tf.function` (the Keras train step) count every time the step runs, not
    once at trace time. They live outside any strategy scope and are never
    synchronized: each worker counts what it sends.

    Example:

    ```python
    stats = strategy.communicator.stats
    before = stats.snapshot()
    model.fit(...)
    sent = stats.delta(before)   # {"dense": {"bytes": ..., "calls": ...}}
    ```
    """

    def __init__(self) -> None:
        with tf.init_scope():
            self._bytes = tf.Variable(
                tf.zeros([len(PATHS)], tf.int64),
                trainable=False,
                name="keras_hybrid_comm_bytes",
            )
            self._calls = tf.Variable(
                tf.zeros([len(PATHS)], tf.int64),
                trainable=False,
                name="keras_hybrid_comm_calls",
            )

    def record(self, path: str, num_bytes, calls: int = 1) -> None:
        """Adds `num_bytes` (int or int tensor) sent on `path`."""
        if path not in PATHS:
            raise ValueError(
                f"`path` must be one of {PATHS}. Received: path={path!r}"
            )
        index = PATHS.index(path)
        num_bytes = tf.cast(num_bytes, tf.int64)
        self._bytes.scatter_add(
            tf.IndexedSlices(tf.reshape(num_bytes, [1]), [index])
        )
        if calls:
            self._calls.scatter_add(
                tf.IndexedSlices(tf.constant([calls], tf.int64), [index])
            )

    def snapshot(self) -> dict[str, dict[str, int]]:
        """Returns the counters now, as plain Python ints."""
        num_bytes = self._bytes.numpy().tolist()
        calls = self._calls.numpy().tolist()
        return {
            path: {"bytes": int(num_bytes[i]), "calls": int(calls[i])}
            for i, path in enumerate(PATHS)
        }

    def delta(self, before: dict) -> dict[str, dict[str, int]]:
        """Returns what was counted since `before` (a `snapshot()`)."""
        now = self.snapshot()
        return {
            path: {
                key: now[path][key] - before[path][key]
                for key in ("bytes", "calls")
            }
            for path in PATHS
        }

    def reset(self) -> None:
        self._bytes.assign(tf.zeros_like(self._bytes))
        self._calls.assign(tf.zeros_like(self._calls))

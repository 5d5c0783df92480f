"""Byte and call counters for every collective, by traffic path."""

import tensorflow as tf

from keras_hybrid.comm import byte_sizes
from keras_hybrid.utils.traffic_paths import PATHS

# Keys of each path's entry in `CommStats.snapshot()`.
COUNTERS = ("bytes", "received_bytes", "calls")


class CommStats:
    """Counts bytes sent and received and collectives issued per path.

    The counters are `tf.Variable`s so that collectives traced inside a
    `tf.function` (the Keras train step) count every time the step runs, not
    once at trace time. They live outside any strategy scope and are never
    synchronized: each worker counts what it sends and receives. Besides the
    paths, the rows this worker's table shards served to pulls (its own
    included) are counted, which shows how evenly the shards are loaded.

    Example:

    ```python
    stats = strategy.communicator.stats
    before = stats.snapshot()
    model.fit(...)
    sent = stats.delta(before)
    # {"dense": {"bytes": ..., "received_bytes": ..., "calls": ...}, ...}
    ```
    """

    def __init__(self) -> None:
        # Elastic resizes of this job, oldest first (Python dicts).
        self.resizes: list[dict] = []
        with tf.init_scope():
            self._counters = tf.Variable(
                tf.zeros([len(COUNTERS), len(PATHS)], tf.int64),
                trainable=False,
                name="keras_hybrid_comm_counters",
            )
            # Bytes (sent, received) per path on links between hosts,
            # padding included, when the hosts are known (`HostGroups`).
            self._cross_host = tf.Variable(
                tf.zeros([2, len(PATHS)], tf.int64),
                trainable=False,
                name="keras_hybrid_cross_host_bytes",
            )
            self._rows_served = tf.Variable(
                tf.zeros([], tf.int64),
                trainable=False,
                name="keras_hybrid_rows_served",
            )

    def record(
        self, path: str, num_bytes, calls: int = 1, received_bytes=None
    ) -> None:
        """Adds `num_bytes` sent and `received_bytes` received on `path`.

        Args:
            path: String. One of `PATHS`.
            num_bytes: Int or int scalar tensor. Bytes this worker sent.
            calls: Int. Collectives issued. Defaults to `1`.
            received_bytes: Int, int scalar tensor or `None`. Bytes this
                worker received. Defaults to `None`: the same as
                `num_bytes`, as for a ring all-reduce.

        Raises:
            ValueError: If `path` is not one of `PATHS`.
        """
        self.record_all([(path, num_bytes, received_bytes, calls)])

    def record_all(self, records: list, unit=1) -> None:
        """Adds several `record`s in one update of the counters (a traced
        step builds one op for them, or a few where a size is a tensor).

        Args:
            records: List of `(path, num_bytes, received_bytes, calls)`,
                as `record` takes them.
            unit: Int or int64 scalar tensor. Bytes per unit of the
                records' sizes (e.g. a row's bytes, when they count rows).

        Raises:
            ValueError: If a path is not one of `PATHS`.
        """
        cells, sizes, call_cells, calls_made = [], [], [], []
        for path, sent, received, calls in records:
            if path not in PATHS:
                raise ValueError(
                    f"`path` must be one of {PATHS}. Received: path={path!r}"
                )
            index = PATHS.index(path)
            cells += [[0, index], [1, index]]
            sizes += [sent, sent if received is None else received]
            if calls:
                call_cells.append([2, index])
                calls_made.append(calls)
        values = byte_sizes.int64_vector(sizes)
        if not (isinstance(unit, int) and unit == 1):
            values = values * unit
        if calls_made:
            values = tf.concat(
                [values, tf.constant(calls_made, tf.int64)], axis=0
            )
        self._counters.scatter_nd_add(cells + call_cells, values)

    def record_cross_host(self, path: str, sent, received) -> None:
        """Adds bytes of `path` this worker sent to and received from
        workers on other hosts, padding included (on the wire).

        Args:
            path: String. One of `PATHS`.
            sent: Int or int tensor. Bytes sent to other hosts.
            received: Int or int tensor. Bytes received from them.
        """
        if path not in PATHS:
            raise ValueError(
                f"`path` must be one of {PATHS}. Received: path={path!r}"
            )
        index = PATHS.index(path)
        self._cross_host.scatter_nd_add(
            [[0, index], [1, index]], byte_sizes.int64_vector([sent, received])
        )

    def cross_host_snapshot(self) -> dict[str, dict[str, int]]:
        """`{path: {"bytes": sent, "received_bytes": received}}` on links
        between hosts so far (zero where the hosts are unknown)."""
        counters = self._cross_host.numpy().tolist()
        return {
            path: {"bytes": counters[0][i], "received_bytes": counters[1][i]}
            for i, path in enumerate(PATHS)
        }

    def cross_host_delta(self, before: dict) -> dict[str, dict[str, int]]:
        """`cross_host_snapshot()` minus `before` (an earlier one)."""
        now = self.cross_host_snapshot()
        return {
            path: {k: now[path][k] - before[path][k] for k in now[path]}
            for path in PATHS
        }

    def record_resize(self, event: dict) -> None:
        """Keeps the record of one elastic resize (`ElasticResize`): global
        step, reason, old and new size, bytes moved, stall seconds."""
        self.resizes.append(dict(event))

    def record_rows_served(self, num_rows) -> None:
        """Adds `num_rows` (int or int tensor) rows served by local shards."""
        self._rows_served.assign_add(tf.cast(num_rows, tf.int64))

    def rows_served(self) -> int:
        """Int. Rows this worker's shards served to pulls so far."""
        return int(self._rows_served.numpy())

    def snapshot(self) -> dict[str, dict[str, int]]:
        """Returns the counters now, as plain Python ints."""
        counters = self._counters.numpy().tolist()
        return {
            path: {key: int(counters[k][i]) for k, key in enumerate(COUNTERS)}
            for i, path in enumerate(PATHS)
        }

    def delta(self, before: dict) -> dict[str, dict[str, int]]:
        """Returns what was counted since `before` (a `snapshot()`)."""
        now = self.snapshot()
        return {
            path: {key: now[path][key] - before[path][key] for key in COUNTERS}
            for path in PATHS
        }

    def reset(self) -> None:
        self._counters.assign(tf.zeros_like(self._counters))
        self._cross_host.assign(tf.zeros_like(self._cross_host))
        self._rows_served.assign(tf.zeros_like(self._rows_served))

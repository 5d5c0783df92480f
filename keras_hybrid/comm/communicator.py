"""The `Communicator` interface every engine implements."""

import abc
import dataclasses

import numpy as np
import tensorflow as tf

from keras_hybrid.comm import byte_sizes
from keras_hybrid.comm import capacity
from keras_hybrid.comm.comm_stats import CommStats

REDUCE_OPS = ("sum", "mean", "max")


class Communicator(abc.ABC):
    """Collectives among the worker processes of one job.

    Every method is callable eagerly and inside a `tf.function`, and every
    worker must call the same methods with tensors of the same dtypes. Only
    `all_gather` and `all_to_all` accept sizes that differ between workers.
    Each call charges the bytes this worker sends to a traffic `path` of
    `CommStats`.

    Args:
        rank: Int. This worker's index, `0 <= rank < size`.
        size: Int. Number of worker processes.
        timeout_seconds: Float. How long a collective may wait for its peers
            before it fails with `tf.errors.DeadlineExceededError`.
        bucket_bytes: Int. Dense all-reduces are fused into buckets of at
            most this many bytes.
    """

    def __init__(
        self,
        rank: int,
        size: int,
        timeout_seconds: float,
        bucket_bytes: int,
    ) -> None:
        self.rank = rank
        self.size = size
        self.timeout_seconds = timeout_seconds
        self.bucket_bytes = bucket_bytes
        self.stats = CommStats()
        # `HostGroups` when every host runs equally many workers (set by the
        # strategy from the cluster): byte counts then tell links between
        # hosts apart; `None` otherwise.
        self.hosts = None
        # Whether fused sparse exchanges run hierarchically over `hosts`
        # (`sparse.hierarchical_exchange`): set by the strategy; `None`
        # until the cost model decides at the first fused exchange.
        self.hierarchical = False

    @property
    def width(self) -> int:
        """Int. Length of the count vectors of `all_to_all` and
        `plan_exchange`: the number of workers. An engine whose group can
        change inside a traced step (an elastic job) uses the most workers
        it can have; counts for ranks beyond `size` are zero."""
        return self.size

    def size_tensor(self) -> tf.Tensor:
        """The number of workers as an int32 tensor; in a traced step, the
        size when the step runs (an elastic group's current size)."""
        return tf.constant(self.size, tf.int32)

    def all_reduce(
        self,
        tensors: list[tf.Tensor],
        op: str = "sum",
        path: str = "dense",
    ) -> list[tf.Tensor]:
        """Reduces each tensor across workers, fused into buckets of at most
        `bucket_bytes` per dtype (one `_all_reduce_flat` per bucket)."""
        if op not in REDUCE_OPS:
            raise ValueError(
                f"`op` must be one of {REDUCE_OPS}. Received: op={op!r}"
            )
        tensors = [tf.convert_to_tensor(t) for t in tensors]
        if self.size == 1:
            return [tf.identity(t) for t in tensors]
        results: list = [None] * len(tensors)
        for bucket in self._buckets(tensors):
            reduced = self._all_reduce_flat(
                [tensors[i] for i in bucket], op, path
            )
            for i, value in zip(bucket, reduced, strict=True):
                results[i] = value
        return results

    def _buckets(self, tensors) -> list[list[int]]:
        """Groups tensor indices by dtype into buckets of <= bucket_bytes;
        a tensor whose static shape is not fully known (a gradient through
        a `tf.tensordot` of a partly unknown shape) has a bucket of its
        own."""
        buckets: list[list[int]] = []
        open_bucket: dict = {}
        for i, t in enumerate(tensors):
            if not t.shape.is_fully_defined():
                # Its size is known only when the step runs: alone.
                buckets.append([i])
                continue
            nbytes = byte_sizes.static_bytes(t)
            current = open_bucket.get(t.dtype)
            if current is None or current[1] + nbytes > self.bucket_bytes:
                current = [[], 0]
                buckets.append(current[0])
                open_bucket[t.dtype] = current
            current[0].append(i)
            current[1] += nbytes
        return buckets

    @abc.abstractmethod
    def _all_reduce_flat(self, tensors, op: str, path: str) -> list:
        """All-reduces one bucket of same-dtype tensors as one collective;
        returns them reduced, in their shapes."""

    @abc.abstractmethod
    def all_gather(
        self, tensor: tf.Tensor, path: str = "control", key: str | None = None
    ) -> tuple:
        """Concatenates every worker's `tensor` along axis 0.

        Args:
            tensor: This worker's rows.
            path: String. The `CommStats` path charged.
            key: Optional string naming the call site, for a gather whose
                rows change from step to step inside a traced step. An
                engine whose collectives are cheaper at a stable shape
                (Horovod) pads the rows up to a high-water mark kept per
                key and charges the padding to `padding`. Defaults to
                `None`: no padding.

        Returns:
            `(gathered, sizes)`: the rows of all workers in rank order, and
            an int32 vector with the number of rows each worker gave.
        """

    @abc.abstractmethod
    def all_to_all(
        self,
        tensor: tf.Tensor,
        send_counts: tf.Tensor,
        path: str = "control",
        plan: "ExchangePlan | None" = None,
    ) -> tuple:
        """Sends `send_counts[j]` consecutive rows of `tensor` to worker j.

        Args:
            tensor: Rows grouped by destination rank.
            send_counts: Int vector `[width]`.
            path: String. The `CommStats` path charged.
            plan: Optional `ExchangePlan` from `plan_exchange` whose
                `send_counts` equal these. It saves the small control
                collective that tells each worker what it receives. Its
                `reversed()` plan sends replies back the same way.

        Returns:
            `(received, recv_counts)`: the rows received, grouped by source
            rank in rank order, and how many came from each worker.
        """

    def all_to_all_among(
        self,
        tensor: tf.Tensor,
        send_counts: tf.Tensor,
        peers: tuple,
        path: str = "control",
        plan: "ExchangePlan | None" = None,
    ) -> tuple:
        """`all_to_all` whose counts are zero outside `peers` (ranks,
        this worker included; the same set on every member of a group).
        An engine that can talk to a subset only does so; this one runs
        the full all-to-all, which is equal in result."""
        del peers
        return self.all_to_all(tensor, send_counts, path, plan)

    def plan_exchange(
        self, send_counts: tf.Tensor, flag: tf.Tensor | int = 0
    ) -> "ExchangePlan":
        """Agrees on the counts and capacity of an all-to-all in one control
        collective, and shares one int `flag` per worker (for example "my
        input was invalid") on the way.

        Each worker sends every peer three int32: the count it will send
        it, its flag and the largest count it sends anyone (one fixed-size
        all-to-all), so the control traffic per worker is O(N), not the
        N x N count matrix, and every worker still learns the largest
        count of all pairs, which the capacity is taken from.
        """
        send_counts = tf.cast(tf.reshape(send_counts, [self.width]), tf.int32)
        flag = tf.reshape(tf.cast(flag, tf.int32), [1])
        if self.size == 1:
            cap = capacity.capacity_for(tf.reduce_max(send_counts))
            return ExchangePlan(send_counts, send_counts, cap, flag)
        peak = tf.reshape(tf.reduce_max(send_counts), [1])
        rows = tf.stack(
            [
                send_counts,
                tf.tile(flag, [self.width]),
                tf.tile(peak, [self.width]),
            ],
            axis=1,
        )  # [width, 3]: row j goes to worker j.
        got = self._all_to_all_fixed(rows, "control")
        return ExchangePlan(
            send_counts,
            got[:, 0],
            capacity.capacity_for(tf.reduce_max(got[:, 2])),
            got[:, 1],
        )

    def plan_packed_exchange(
        self,
        part_counts: tf.Tensor,
        flag: tf.Tensor | int,
        weights: list,
    ) -> tuple:
        """`plan_exchange` for an all-to-all that packs several parts (for
        example the ids of several tables) into each block, and for
        exchanges whose rows are the parts' rows weighted (for example
        their elements), all in one control collective.

        Each worker sends every peer its `P` part counts, its flag and,
        for each weighting, the largest count it sends anyone:
        `P + 1 + len(weights)` int32 per peer (O(N P) per worker).

        Args:
            part_counts: Int `[size, P]`: rows of each part sent to each
                worker.
            flag: Int scalar shared with every worker (see `flags`).
            weights: List of int `[P]` vectors; plan `k` counts
                `part_counts @ weights[k]`.

        Returns:
            `(plans, recv_part_counts)`: one `ExchangePlan` per weighting,
            and the int32 `[size, P]` part counts received from each
            worker.
        """
        counts = tf.cast(part_counts, tf.int32)
        num_parts = counts.shape[1]
        mats = tf.cast(tf.stack(weights, axis=1), tf.int32)  # [P, K]
        sent = tf.matmul(counts, mats)  # [size, K]
        flag = tf.reshape(tf.cast(flag, tf.int32), [1, 1])
        peaks = tf.reduce_max(sent, axis=0, keepdims=True)  # [1, K]
        rows = tf.concat(
            [
                counts,
                tf.tile(flag, [self.size, 1]),
                tf.tile(peaks, [self.size, 1]),
            ],
            axis=1,
        )  # row j goes to worker j.
        if self.size == 1:
            got = rows
        else:
            got = self._all_to_all_fixed(rows, "control")
        recv_parts = got[:, :num_parts]
        received = tf.matmul(recv_parts, mats)
        flags = got[:, num_parts]
        plans = [
            ExchangePlan(
                sent[:, k],
                received[:, k],
                capacity.capacity_for(tf.reduce_max(got[:, num_parts + 1 + k])),
                flags,
            )
            for k in range(len(weights))
        ]
        return plans, recv_parts

    def exchange_packed_ids(
        self, ids, part_counts, flag, weights: list, check
    ) -> tuple:
        """`plan_packed_exchange`, then the all-to-all of `ids` by the first
        plan, in as few dependent collectives as the engine allows.

        Args:
            ids: Int rows `[n]`, grouped by destination rank.
            part_counts, flag, weights: As for `plan_packed_exchange`.
            check: Callable taking the flags (int32 `[width]`) and returning
                assertions that must pass, on every worker, before any
                worker reads rows for the ids it was asked.

        Returns:
            `(plans, recv_part_counts, asked)`: as `plan_packed_exchange`,
            and the ids received, by source rank.
        """
        plans, recv_parts = self.plan_packed_exchange(
            part_counts, flag, weights
        )
        with tf.control_dependencies(check(plans[0].flags)):
            ids = tf.identity(ids)
        asked, _ = self.all_to_all(ids, plans[0].send_counts, "ids", plans[0])
        return plans, recv_parts, asked

    def exchange_counts(
        self, send_counts: tf.Tensor, path: str = "control"
    ) -> tf.Tensor:
        """Returns `recv_counts`: `recv_counts[j]` is what worker j sends
        this worker, from every worker's `send_counts` (int `[width]`), in
        one fixed-size all-to-all (O(N) bytes per worker)."""
        send_counts = tf.cast(tf.reshape(send_counts, [self.width]), tf.int32)
        if self.size == 1:
            return tf.identity(send_counts)
        return self._all_to_all_fixed(send_counts, path)

    def move_rows(self, tensor, matrix, path: str = "control") -> tuple:
        """Eager all-to-all whose counts every worker knows already.

        For moves planned alike on every worker (a resize's rows, a buddy
        copy): `matrix[i, j]` is the rows worker i sends worker j, so no
        counts travel. This engine sends them in one `all_to_all`.

        Args:
            tensor: This worker's rows, grouped by destination rank
                (`matrix[rank, j]` rows for worker j).
            matrix: Int array `[size, size]`, the same on every worker.
            path: String. The `CommStats` path the rows are charged to.

        Returns:
            `(received, wire_rows)`: the rows sent to this worker, by
            source rank; and the rows all workers put on the wire,
            padding included (the same figure on every worker).
        """
        matrix = np.asarray(matrix, np.int64)
        extra = [0] * (self.width - self.size)
        plan = ExchangePlan(
            send_counts=tf.constant([*matrix[self.rank], *extra], tf.int32),
            recv_counts=tf.constant([*matrix[:, self.rank], *extra], tf.int32),
            capacity=capacity.capacity_for(tf.constant(int(matrix.max()))),
            flags=tf.zeros([self.width], tf.int32),
        )
        received, _ = self.all_to_all(
            tensor, plan.send_counts, path=path, plan=plan
        )
        return received, self.move_wire_rows(matrix)

    def move_wire_rows(self, matrix) -> int:
        """Rows all workers put on the wire for `move_rows(.., matrix)`,
        padding included; exact splits here."""
        matrix = np.asarray(matrix, np.int64)
        return int(matrix.sum() - np.trace(matrix))

    @abc.abstractmethod
    def _all_to_all_fixed(self, tensor: tf.Tensor, path: str) -> tf.Tensor:
        """All-to-all of equal blocks: row j of `tensor` (`[width, ...]`,
        the same shape on every worker) goes to worker j; returns the rows
        received (`[width, ...]`), row j from worker j. Charges the
        `size - 1` rows sent to peers to `path`."""

    def gather_fixed(
        self, tensor: tf.Tensor, path: str = "control"
    ) -> tf.Tensor:
        """All-gather, in one collective, of a tensor whose shape is the
        same on every worker: returns `[size * rows, ...]` in rank order."""
        tensor = tf.convert_to_tensor(tensor)
        if self.size == 1:
            return tf.identity(tensor)
        return self._gather_fixed(tensor, path)

    @abc.abstractmethod
    def _gather_fixed(self, tensor: tf.Tensor, path: str) -> tf.Tensor:
        """All-gather of a tensor whose shape is the same on all workers,
        charged to `path`."""

    @abc.abstractmethod
    def broadcast(
        self, tensor: tf.Tensor, root: int = 0, path: str = "control"
    ) -> tf.Tensor:
        """Returns `root`'s `tensor` on every worker."""

    def barrier(self) -> None:
        """Returns once every worker has reached the barrier."""
        self.all_reduce([tf.zeros([1], tf.int32)], path="control")


@dataclasses.dataclass(frozen=True)
class ExchangePlan:
    """Counts of one all-to-all as this worker sees them.

    Attributes:
        send_counts: Int32 `[width]`: rows this worker sends to each
            worker (`Communicator.width`).
        recv_counts: Int32 `[width]`: rows it receives from each worker.
        capacity: Int32 scalar on the capacity ladder, >= every count of
            every pair.
        flags: Int32 `[width]`: the `flag` each worker passed.
    """

    send_counts: tf.Tensor
    recv_counts: tf.Tensor
    capacity: tf.Tensor
    flags: tf.Tensor

    def reversed(self) -> "ExchangePlan":
        """The plan that sends replies back to where requests came from."""
        return ExchangePlan(
            self.recv_counts, self.send_counts, self.capacity, self.flags
        )


def split_flat(reduced: tf.Tensor, tensors) -> list:
    """The parts of the 1-D `reduced` in the shapes of `tensors` (a bucket,
    or one tensor whose shape is known only when the step runs)."""
    if len(tensors) == 1 and not tensors[0].shape.is_fully_defined():
        return [tf.reshape(reduced, tf.shape(tensors[0]))]
    sizes = [t.shape.num_elements() for t in tensors]
    return [
        tf.reshape(part, t.shape)
        for part, t in zip(tf.split(reduced, sizes), tensors, strict=True)
    ]

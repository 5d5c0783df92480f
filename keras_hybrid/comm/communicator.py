"""The `Communicator` interface every engine implements."""

import abc
import dataclasses

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
        """Groups tensor indices by dtype into buckets of <= bucket_bytes."""
        buckets: list[list[int]] = []
        open_bucket: dict = {}
        for i, t in enumerate(tensors):
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
    def all_gather(self, tensor: tf.Tensor, path: str = "control") -> tuple:
        """Concatenates every worker's `tensor` along axis 0.

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
            send_counts: Int vector `[size]`.
            path: String. The `CommStats` path charged.
            plan: Optional `ExchangePlan` from `plan_exchange` whose
                `send_counts` equal these. It saves the two small control
                collectives that agree on counts and capacity. Its
                `reversed()` plan sends replies back the same way.

        Returns:
            `(received, recv_counts)`: the rows received, grouped by source
            rank in rank order, and how many came from each worker.
        """

    def plan_exchange(
        self, send_counts: tf.Tensor, flag: tf.Tensor | int = 0
    ) -> "ExchangePlan":
        """Agrees on the counts and capacity of an all-to-all in one
        control collective, and shares one int `flag` per worker (for
        example "my input was invalid") on the way.

        Every worker gathers every worker's `send_counts` and flag (one
        small fixed-size all-gather). An engine that needs no padding
        (Horovod) still gets a capacity, to keep one plan for all.
        """
        send_counts = tf.cast(tf.reshape(send_counts, [self.size]), tf.int32)
        flag = tf.reshape(tf.cast(flag, tf.int32), [1])
        if self.size == 1:
            cap = capacity.capacity_for(tf.reduce_max(send_counts))
            return ExchangePlan(send_counts, send_counts, cap, flag)
        rows = tf.reshape(
            self._gather_fixed(tf.concat([send_counts, flag], 0), "control"),
            [self.size, self.size + 1],
        )
        matrix = rows[:, : self.size]
        return ExchangePlan(
            send_counts,
            matrix[:, self.rank],
            capacity.capacity_for(tf.reduce_max(matrix)),
            rows[:, self.size],
        )

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
    """Counts and padding capacity of one all-to-all, known to all workers.

    Attributes:
        send_counts: Int32 `[size]`: rows this worker sends to each worker.
        recv_counts: Int32 `[size]`: rows it receives from each worker.
        capacity: Int32 scalar on the capacity ladder, >= every count.
        flags: Int32 `[size]`: the `flag` each worker passed.
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

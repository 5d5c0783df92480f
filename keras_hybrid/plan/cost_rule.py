"""Whether partitioning a table pays: the simulator's cost model per table.

For one table of `rows` rows of `row_bytes` bytes, looked up `lookups`
times per worker and step on `workers` workers linked by `link`:

- partitioned: a lookup exchanges a count vector, the unique ids, their
  rows (pull) and their gradient rows (push), about 2 u r bytes per worker
  in 4 collectives, plus the padding of every all-to-all block to the
  largest pair count (`costs.table_exchange.hybrid_table`, with the counts
  drawn as the partition scatters ids), where u, the distinct ids, is
  `min(lookups, rows)`: exact for a position table read in full and for
  random ids of a big table, an upper bound otherwise (skewed ids repeat),
  so the rule errs towards replicating;
- replicated (only below `REPLICA_BYTES_LIMIT`: a bigger table, with its
  optimizer state, would cost every worker several times its size in
  memory), the cheaper of: the table's gradient densified into the
  dense all-reduce, which exists anyway (no extra latency), or its
  `IndexedSlices` summed per id on each worker and all-gathered, rows and
  ids (`"allgather_unique"`: stock TensorFlow gathers one row per lookup;
  this gathers one per distinct id, in one round where partitioning takes
  three).

Times come from `costs.cost_model.exchange_seconds` on a flat cluster of
one worker per host.
"""

import dataclasses
import functools
import math

from keras_hybrid.costs import cluster_spec
from keras_hybrid.costs import cost_model
from keras_hybrid.costs import exchange
from keras_hybrid.costs import table_exchange
from keras_hybrid.costs import traffic

DEFAULT_BANDWIDTH = "10gbit"
DEFAULT_LATENCY = "50us"
# Per-worker batch assumed for a lookup whose batch dimension is unknown
# when the step is traced.
ASSUMED_BATCH = 128
SYNCS = ("allreduce", "allgather_unique")
# A replica of a table this big, with its optimizer state, costs more
# memory per worker than any traffic saving is worth: it is partitioned.
REPLICA_BYTES_LIMIT = 64 * 2**20
# Predicted times this close (partitioned at most this fraction slower
# than replicated) are a tie: a tie goes to partitioning if it sends no
# more bytes, since a shard also holds 1/N of the table and its optimizer
# state. Placement then does not flip on a model's rounding.
TIE_MARGIN = 0.05


@dataclasses.dataclass(frozen=True)
class Link:
    """The network between workers, as the placement cost rule sees it.

    Args:
        bandwidth: String or float. A tc-style rate (`"10gbit"`,
            `"100mbit"`) or bytes per second. Defaults to `"10gbit"`.
        latency: String or float. A tc-style time (`"50us"`) or seconds,
            per message. Defaults to `"50us"`.

    Example:

    ```python
    strategy = keras_hybrid.HybridStrategy(
        link=keras_hybrid.Link(bandwidth="100gbit", latency="5us"))
    ```

    Raises:
        ValueError: If the rate is not positive or the time is negative.
    """

    bandwidth: str | float = DEFAULT_BANDWIDTH
    latency: str | float = DEFAULT_LATENCY

    def __post_init__(self) -> None:
        self.bytes_per_second  # noqa: B018 (validates)
        self.seconds  # noqa: B018

    @property
    def bytes_per_second(self) -> float:
        if isinstance(self.bandwidth, str):
            return cluster_spec.parse_rate(self.bandwidth)
        if not self.bandwidth > 0:
            raise ValueError(
                f"`bandwidth` must be > 0 bytes/s. Received: {self.bandwidth}"
            )
        return float(self.bandwidth)

    @property
    def seconds(self) -> float:
        if isinstance(self.latency, str):
            return cluster_spec.parse_time(self.latency)
        if not self.latency >= 0:
            raise ValueError(
                f"`latency` must be >= 0 seconds. Received: {self.latency}"
            )
        return float(self.latency)

    def __str__(self) -> str:
        return f"{self.bandwidth}/{self.latency}"

    def get_config(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_config(cls, config: dict) -> "Link":
        return cls(**config)


@dataclasses.dataclass(frozen=True)
class TableCost:
    """Predicted communication of one table per worker and step.

    Attributes:
        lookups: Int. Ids looked up per worker and step.
        unique: Float. Expected distinct ids among them.
        sparse_bytes: Float. Bytes sent if partitioned.
        sparse_seconds: Float.
        dense_bytes: Float. Bytes sent if replicated (cheaper sync).
        dense_seconds: Float.
        dense_sync: String, one of `SYNCS`: how a replicated copy syncs.
        table_bytes: Int. Size of the whole table.
        workers: Int. The workers the choice is weighed for.
    """

    lookups: int
    unique: float
    sparse_bytes: float
    sparse_seconds: float
    dense_bytes: float
    dense_seconds: float
    dense_sync: str
    table_bytes: int = 0
    workers: int = 0

    @property
    def margin(self) -> float:
        """Float. How much slower partitioned is than replicated, as a
        fraction of replicated's time (negative: faster)."""
        return self.sparse_seconds / max(self.dense_seconds, 1e-12) - 1.0

    @property
    def tie(self) -> bool:
        """Whether the times are within `TIE_MARGIN` of each other."""
        return abs(self.margin) <= TIE_MARGIN

    @property
    def partition(self) -> bool:
        if self.table_bytes >= REPLICA_BYTES_LIMIT:
            return True
        if self.tie and self.sparse_bytes <= self.dense_bytes:
            return True
        return self.sparse_seconds < self.dense_seconds

    def summary(self) -> str:
        """The figures that decided, in words (the plan's reason): the
        chosen way's time and bytes first, then the other's."""
        if self.table_bytes >= REPLICA_BYTES_LIMIT:
            return f"{self.table_bytes / 2**20:.0f} MiB is too big to replicate"
        mine = ("partitioned", self.sparse_seconds, self.sparse_bytes)
        other = ("replicated", self.dense_seconds, self.dense_bytes)
        if not self.partition:
            mine, other = other, mine
        times = (
            f"{mine[1] * 1e3:.3f} vs {other[1] * 1e3:.3f} ms/step "
            f"{other[0]} ({mine[1] / max(other[1], 1e-12) - 1:+.1%})"
        )
        sent = f"{_kb(mine[2])} vs {_kb(other[2])} kB/step"
        if self.partition and self.tie and self.margin >= 0:
            return (
                f"a tie, {times}: no more bytes ({sent}) and "
                f"1/{self.workers} of the memory"
            )
        return f"{times}; {sent}"


def _kb(nbytes: float) -> str:
    return f"{nbytes / 1e3:.1f}"


def expected_unique(rows: int, lookups: int) -> float:
    """Distinct ids assumed among `lookups` ids of a `rows`-row table."""
    return float(min(rows, lookups))


@dataclasses.dataclass(frozen=True)
class _Table:
    """What `costs.table_exchange` and `costs.traffic` need of a
    table looked up once a step."""

    row_bytes: int
    lookups_per_step: int
    unique: float
    calls: int = 1
    index_bytes: int = exchange.ID_BYTES

    def unique_ids(self, batch, call) -> float:
        del batch, call
        return self.unique

    def table_unique_ids(self, batch) -> float:
        del batch
        return self.unique

    def lookups(self, batch) -> int:
        del batch
        return self.lookups_per_step


def _priced(exchanges, spec) -> tuple[float, float]:
    sent = sum(sum(e.bytes.values()) for e in exchanges)
    return sent, sum(cost_model.exchange_seconds(e, spec) for e in exchanges)


# Pure functions of hashable arguments, asked again for every variable each
# time a plan is made: each call runs the simulator's draws.
@functools.lru_cache(maxsize=4096)
def table_cost(
    rows: int,
    row_bytes: int,
    lookups: int,
    workers: int,
    link: Link,
    unique: float | None = None,
) -> TableCost:
    """Both choices' bytes and seconds for one table (see module doc):
    the simulator's exchanges, padding, ids and counts included."""
    return _table_cost(rows, row_bytes, lookups, workers, link, unique)


def _table_cost(rows, row_bytes, lookups, workers, link, unique):
    spec = cluster_spec.ClusterSpec(
        workers=workers,
        inter_bandwidth=link.bytes_per_second,
        inter_latency=link.seconds,
    )
    n = workers
    if unique is None:
        unique = expected_unique(rows, lookups)
    table = _Table(row_bytes, lookups, unique)
    sparse_bytes, sparse_seconds = _priced(
        table_exchange.hybrid_table(table, n, batch=0), spec
    )
    table_bytes = rows * row_bytes
    # Fused into the dense all-reduce: bandwidth only.
    reduce_bytes = 2 * (n - 1) * table_bytes / n
    reduce_seconds = reduce_bytes / link.bytes_per_second
    # Summed per id before the gather: one row per distinct id.
    deduped = _Table(row_bytes, math.ceil(unique), unique)
    gather_bytes, gather_seconds = _priced(
        traffic.allgather_table(deduped, n, batch=0), spec
    )
    if reduce_seconds <= gather_seconds:
        dense = (reduce_bytes, reduce_seconds, "allreduce")
    else:
        dense = (gather_bytes, gather_seconds, "allgather_unique")
    return TableCost(
        lookups,
        unique,
        sparse_bytes,
        sparse_seconds,
        *dense,
        table_bytes,
        workers,
    )


# Candidates are chosen before use is seen: a table is worth watching if
# partitioning pays when each id repeats this often in a step (skewed ids).
CANDIDATE_REPEATS = 4


@functools.lru_cache(maxsize=4096)
def may_pay(rows: int, row_bytes: int, workers: int, link: Link) -> bool:
    """Whether partitioning pays for some number of lookups per step (1,
    2, 4, ... up to 16 times the rows), if ids repeat
    `CANDIDATE_REPEATS` times."""
    lookups = 1
    while lookups <= 16 * rows:
        unique = max(1.0, min(lookups, rows) / CANDIDATE_REPEATS)
        cost = table_cost(rows, row_bytes, lookups, workers, link, unique)
        if cost.partition:
            return True
        lookups *= 2
    return False


def lookups_of(shape) -> int:
    """Ids in a lookup of static `shape`; unknown dims count as
    `ASSUMED_BATCH`."""
    count = 1
    for dim in shape:
        count *= ASSUMED_BATCH if dim is None else int(dim)
    return count

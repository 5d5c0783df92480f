"""Bytes and time of a resize: the table rows that move to new owners.

`sparse.resharding` moves whole virtual shards, with the same rows of
every optimizer slot, in one all-to-all per (dtype, row shape) over a
group holding the old and the new workers. Which virtual shards move is a
pure function of the table's rows and the worker counts
(`RowPartition.create(rows, first).resized(...)`), so this module computes
the exact rows each worker sends and receives; on the TF engine each
talking pair's block is padded to its count's step of the capacity ladder
(`comm.pair_moves`, the code the move runs), which it adds. The lower
bound it reports is the least any balanced re-partition must move: the
rows of leaving workers, or the rows that new quotas lack, whichever is
more.
"""

import dataclasses

import numpy as np

from keras_hybrid.comm import ladder
from keras_hybrid.comm import pair_moves
from keras_hybrid.costs import cost_model
from keras_hybrid.costs.exchange import Exchange
from keras_hybrid.sharding.row_partition import RowPartition

# The TF engine's row move (only pairs that move rows talk, each block at
# its own ladder step), its padded all-to-all (`exchange="padded"`), exact
# splits (Horovod).
ENGINES = ("tf", "tf_padded", "exact")


@dataclasses.dataclass(frozen=True)
class ResizedTable:
    """A partitioned table as a resize sees it.

    Attributes:
        rows: Int. Rows of the whole table.
        row_shape: Tuple of ints. Shape of one row.
        dtype_bytes: Int. Bytes per element.
        slots: Int. Optimizer slots partitioned with it (Adam: 2, SGD: 0).
    """

    rows: int
    row_shape: tuple
    dtype_bytes: int = 4
    slots: int = 0

    @property
    def row_bytes(self) -> int:
        return int(np.prod(self.row_shape)) * self.dtype_bytes


@dataclasses.dataclass(frozen=True)
class ResizeTraffic:
    """Bytes of one resize, per worker of the group (old and new).

    Attributes:
        old: Int. Workers before.
        new: Int. Workers after.
        sent: Float array `[group]`. Row bytes each worker sends.
        received: Float array `[group]`. Row bytes each worker receives.
        padding: Float array `[group]`. Padding bytes each worker sends.
        minimum: Float. Least bytes any balanced re-partition moves.
        wires: Tuple of floats. Per all-to-all, the bytes its busiest
            worker puts on the wire (padding included).
    """

    old: int
    new: int
    sent: np.ndarray
    received: np.ndarray
    padding: np.ndarray
    minimum: float
    wires: tuple

    @property
    def total(self) -> float:
        return float(self.sent.sum())

    @property
    def ratio(self) -> float:
        """Moved bytes over the lower bound (1.0 is the least possible)."""
        return self.total / self.minimum if self.minimum else 1.0

    def seconds(self, spec) -> float:
        """Time of the resize's all-to-alls on cluster `spec` (a
        `ClusterSpec` whose `workers` is the group), by the step model."""
        return sum(
            cost_model.exchange_seconds(Exchange("all_to_all", {}, wire), spec)
            for wire in self.wires
        )


def partitions(rows: int, counts) -> list[RowPartition]:
    """The partitions of a `rows` table created on `counts[0]` workers and
    resized to each of `counts[1:]` in turn."""
    parts = [RowPartition.create(rows, counts[0])]
    for n in counts[1:]:
        parts.append(parts[-1].resized(n))
    return parts


def move_matrix(old: RowPartition, new: RowPartition, size: int):
    """Rows of one table copy moving from worker i to j, `[size, size]`."""
    matrix = np.zeros((size, size), np.int64)
    for v, (src, dst) in old.virtual.moved_to(new.virtual).items():
        matrix[src, dst] += old.virtual_rows[v]
    return matrix


def minimum_rows(old: RowPartition, new_workers: int) -> float:
    """Least rows a balanced re-partition of `old` onto `new_workers`
    (workers `>= new_workers` leave) must move."""
    held = np.array([old.rows_on_shard(w) for w in range(old.num_shards)])
    leaving = held[new_workers:].sum()
    quota = old.num_rows // new_workers
    staying = np.zeros(new_workers, np.int64)
    staying[: min(new_workers, len(held))] = held[:new_workers]
    lacking = np.maximum(0, quota - staying).sum()
    return float(max(leaving, lacking))


def resize_traffic(tables, counts, engine: str = "tf") -> list[ResizeTraffic]:
    """Predicts each resize of a chain of worker counts, e.g. `(3, 4)` or
    `(2, 4, 3)`, for tables created on `counts[0]` workers.

    Args:
        tables: Iterable of `ResizedTable`.
        counts: Sequence of ints (>= 2 entries). Worker counts in turn.
        engine: String, one of `ENGINES`: `"tf"`, the TF engine's row
            move (`Communicator.move_rows`, elastic or not): only pairs
            that move rows talk, each block padded to its own count's
            ladder step (`comm.pair_moves.block_rows`); `"tf_padded"` pads
            every block to the ladder capacity of the largest pair (the
            TF engine with `exchange="padded"`); `"exact"` (Horovod)
            sends exact splits.

    Returns:
        A list of `ResizeTraffic`, one per resize.

    Raises:
        ValueError: If `counts` has fewer than 2 entries, or `engine` is
            unknown.
    """
    counts = [int(c) for c in counts]
    if len(counts) < 2 or min(counts) < 1:
        raise ValueError(
            "`counts` must be at least two worker counts >= 1, e.g. (3, 4). "
            f"Received: counts={counts}"
        )
    if engine not in ENGINES:
        raise ValueError(
            f"`engine` must be one of {ENGINES}. Received: engine={engine!r}"
        )
    tables = list(tables)
    chains = [partitions(t.rows, counts) for t in tables]
    out = []
    for step in range(1, len(counts)):
        size = max(counts[step - 1], counts[step])
        out.append(_one_resize(tables, chains, step, size, engine))
    return out


def _one_resize(tables, chains, step, size, engine) -> ResizeTraffic:
    sent = np.zeros(size)
    received = np.zeros(size)
    padding = np.zeros(size)
    minimum = 0.0
    groups: dict = {}
    for table, chain in zip(tables, chains, strict=True):
        old, new = chain[step - 1], chain[step]
        copies = 1 + table.slots
        matrix = move_matrix(old, new, size) * copies
        key = (table.row_shape, table.dtype_bytes)
        group = groups.setdefault(key, [np.zeros((size, size)), 0])
        group[0] = group[0] + matrix
        group[1] = table.row_bytes
        minimum += minimum_rows(old, new.num_shards) * copies * table.row_bytes
    wires = []
    for matrix, row_bytes in groups.values():
        rows_out, rows_in = matrix.sum(axis=1), matrix.sum(axis=0)
        sent += rows_out * row_bytes
        received += rows_in * row_bytes
        if not matrix.any():
            continue
        if engine == "tf":
            blocks = pair_moves.block_rows(matrix)
            slots_out, slots_in = blocks.sum(axis=1), blocks.sum(axis=0)
            padding += (slots_out - rows_out) * row_bytes
            busiest = np.maximum(slots_out, slots_in).max()
            wires.append(float(busiest * row_bytes))
        elif engine == "tf_padded":
            cap = int(ladder.capacities_of(int(matrix.max())))
            slots = (size - 1) * cap
            padding += (slots - rows_out) * row_bytes
            wires.append(float(slots * row_bytes))
        else:
            busiest = np.maximum(rows_out, rows_in).max()
            wires.append(float(busiest * row_bytes))
    return ResizeTraffic(
        old=chains[0][step - 1].num_shards,
        new=chains[0][step].num_shards,
        sent=sent,
        received=received,
        padding=padding,
        minimum=minimum,
        wires=tuple(wires),
    )


def table(results, spec_of=None) -> str:
    """A text table of `resize_traffic` results; `spec_of(n)` gives the
    `ClusterSpec` of an `n`-worker group, for the seconds column."""
    header = (
        f"{'resize':>7} {'moved MB':>9} {'minimum MB':>10} {'ratio':>6} "
        f"{'padding MB':>10} {'max sent MB/worker':>18} {'seconds':>8}"
    )
    lines = [header, "-" * len(header)]
    for r in results:
        seconds = "-"
        if spec_of is not None:
            seconds = f"{r.seconds(spec_of(max(r.old, r.new))):.4f}"
        lines.append(
            f"{f'{r.old}->{r.new}':>7} {r.total / 1e6:9.3f} "
            f"{r.minimum / 1e6:10.3f} {r.ratio:6.3f} "
            f"{r.padding.sum() / 1e6:10.3f} {r.sent.max() / 1e6:18.3f} "
            f"{seconds:>8}"
        )
    return "\n".join(lines)

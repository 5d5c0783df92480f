"""Moves the rows of partitioned tables when the worker set changes.

A table's rows sit in virtual shards that never change (`RowPartition`);
a resize gives some virtual shards new owners (`ShardAssignment.resized`)
and moves them whole, with the same rows of every optimizer slot of the
table. Every worker knows both assignments, so it knows, without asking,
what it sends and receives: the rows travel in one `all_to_all` per
(dtype, row shape), charged to the `"reshard"` path of `CommStats`, and
each `ShardedTable` takes its new rows in place (the same variable, so
Keras layers, optimizers and the router keep their references). Compiled
steps captured the old row counts and lookup constants: the caller traces
them again (`docs/architecture.md`, "Resizing tables").

Nothing here knows how workers are started or how the group was formed:
it runs on whatever `Communicator` it is given.
"""

import dataclasses

import numpy as np
import tensorflow as tf
from absl import logging

from keras_hybrid.comm import capacity
from keras_hybrid.comm.communicator import ExchangePlan
from keras_hybrid.sparse.shard_assignment import ShardAssignment
from keras_hybrid.sparse.sharded_table import ShardedTable

PATH = "reshard"


def tables_of(strategy) -> list[ShardedTable]:
    """Every partitioned table of `strategy` and its optimizer slots, in
    creation order (the same on every worker)."""
    return strategy.extended.router.sharded_tables()


def reshard_tables(tables, communicator, new_assignment) -> int:
    """Moves rows so that each table follows `new_assignment`.

    A collective: every worker of `communicator` calls it with the same
    arguments, at a step boundary. `communicator` must contain the old and
    the new owners (its ranks are the assignments' workers). The optimizer
    slots of each table in `tables` are moved with it, listed or not.

    Args:
        tables: Iterable of `ShardedTable` (e.g. `tables_of(strategy)`).
        communicator: The `Communicator` spanning old and new workers. The
            tables use it afterwards.
        new_assignment: Int (the new number of workers: each table takes
            `partition.resized(n)`) or a `ShardAssignment` for every table
            (all must have its number of virtual shards).

    Returns:
        Int. Bytes of rows this worker sent (padding excluded; the TF
        engine's all-to-all pads blocks, charged to `"padding"`).

    Raises:
        TypeError: If `tables` holds something else than `ShardedTable`s,
            or `new_assignment` is neither an int nor a `ShardAssignment`.
        ValueError: If the new assignment needs more workers than
            `communicator` has, or has other virtual shards than a table.
    """
    tables = _with_slots(tables)
    targets = [_target(t, new_assignment, communicator) for t in tables]
    for table in tables:
        table.communicator = communicator
    sent = 0
    for group in _groups(tables):
        sent += _move_group(
            [tables[i] for i in group], [targets[i] for i in group]
        )
    logging.info(
        "keras-hybrid: resharded %d tables and slots onto %d workers; "
        "worker %d sent %d bytes.",
        len(tables),
        targets[0].num_shards if targets else 0,
        communicator.rank,
        sent,
    )
    return sent


def rebind_tables(tables, communicator, ranks=None) -> None:
    """Points tables at another communicator, without moving rows.

    For a group that was renumbered: `ranks[old rank] = new rank` relabels
    the owners of every virtual shard. Not a collective.

    Raises:
        ValueError: If a table would have owners outside `communicator`.
    """
    for table in _with_slots(tables):
        part = table.partition
        if ranks is not None:
            owners = tuple(int(ranks[o]) for o in part.virtual.owners)
            count = max(owners) + 1
            part = part.with_assignment(ShardAssignment(owners, count))
        if part.num_shards > communicator.size:
            raise ValueError(
                f"Table {table.path!r} is spread over {part.num_shards} "
                f"workers, more than the communicator's {communicator.size}."
                " Reshard it first, on a communicator with every owner."
            )
        table.communicator = communicator
        table.partition = part


def adopt_partitions(tables, communicator, root: int = 0) -> None:
    """Makes every worker's tables use `root`'s assignments (a collective).

    For a worker that joins a running job: its tables were created for the
    worker count it started with. A worker that owns no virtual shard
    under `root`'s assignment gets an empty shard; it takes rows in the
    next `reshard_tables`.

    Raises:
        ValueError: If this worker would own rows under `root`'s assignment
            but held another one (its rows would be wrong); raised on that
            worker after every broadcast, so the others are not left
            waiting in a collective.
    """
    wrong = []
    for table in _with_slots(tables):
        part = table.partition
        mine = np.asarray([part.num_shards, *part.virtual.owners], np.int32)
        theirs = communicator.broadcast(
            tf.constant(mine), root=root, path="control"
        ).numpy()
        if np.array_equal(mine, theirs):
            table.communicator = communicator
            continue
        owners = tuple(int(o) for o in theirs[1:])
        target = part.with_assignment(ShardAssignment(owners, int(theirs[0])))
        table.communicator = communicator
        if target.rows_on_shard(communicator.rank):
            wrong.append(table.path)
            continue
        table.take_rows(target, tf.zeros((0, *table.full_shape[1:])))
    if wrong:
        raise ValueError(
            f"Worker {communicator.rank} holds tables {wrong} with another "
            f"assignment than worker {root}'s, under which it would own "
            "rows. Only a worker that owns no rows (a joiner) can adopt an "
            "assignment."
        )


def _with_slots(tables) -> list[ShardedTable]:
    """`tables` and their slots, each once, in order."""
    out, seen = [], set()
    for table in tables:
        if not isinstance(table, ShardedTable):
            raise TypeError(
                "`tables` must hold `ShardedTable`s (see "
                f"`tables_of(strategy)`). Received: {type(table).__name__}"
            )
        for t in (table, *table.live_slots()):
            if id(t) not in seen:
                seen.add(id(t))
                out.append(t)
    return out


def _target(table, new_assignment, communicator):
    if isinstance(new_assignment, bool) or not isinstance(
        new_assignment, (int, ShardAssignment)
    ):
        raise TypeError(
            "`new_assignment` must be an int (the new number of workers) "
            "or a `ShardAssignment`. Received: "
            f"{type(new_assignment).__name__}"
        )
    if isinstance(new_assignment, int):
        target = table.partition.resized(new_assignment)
    else:
        target = table.partition.with_assignment(new_assignment)
    if target.num_shards > communicator.size:
        raise ValueError(
            f"The new assignment spreads table {table.path!r} over "
            f"{target.num_shards} workers, but the communicator has "
            f"{communicator.size}. Reshard on a communicator that holds "
            "every old and new owner."
        )
    return target


def _groups(tables) -> list[list[int]]:
    """Indices of tables sharing a dtype and row shape, in order."""
    groups: dict = {}
    for i, table in enumerate(tables):
        key = (table.dtype, tuple(table.full_shape[1:]))
        groups.setdefault(key, []).append(i)
    return list(groups.values())


@dataclasses.dataclass(frozen=True)
class _Moves:
    """What moves between each pair of workers for one table."""

    # (source, destination) -> virtual shards, ascending.
    shards: dict
    rows: np.ndarray  # [size, size] rows of this table from i to j


def _moves(old, new, size: int) -> _Moves:
    shards: dict = {}
    rows = np.zeros((size, size), np.int64)
    for v, (src, dst) in sorted(old.virtual.moved_to(new.virtual).items()):
        shards.setdefault((src, dst), []).append(v)
        rows[src, dst] += old.virtual_rows[v]
    return _Moves(shards, rows)


def _move_group(tables, targets) -> int:
    """One all-to-all for tables of one dtype and row shape."""
    comm = tables[0].communicator
    rank, size = comm.rank, comm.size
    moves = [
        _moves(t.partition, new, size)
        for t, new in zip(tables, targets, strict=True)
    ]
    matrix = sum(m.rows for m in moves)
    received = None
    if matrix.any() and size > 1:
        parts = []
        for dst in range(size):
            for table, move in zip(tables, moves, strict=True):
                index = _rows_of(table.partition, move.shards, (rank, dst))
                if index.size:
                    parts.append(table.read_local_rows(tf.constant(index)))
        send = _concat(parts, tables[0])
        plan = ExchangePlan(
            send_counts=tf.constant(matrix[rank], tf.int32),
            recv_counts=tf.constant(matrix[:, rank], tf.int32),
            capacity=capacity.capacity_for(tf.constant(matrix.max())),
            flags=tf.zeros([size], tf.int32),
        )
        received, _ = comm.all_to_all(
            send, plan.send_counts, path=PATH, plan=plan
        )
    _place(tables, targets, moves, received, matrix)
    row_bytes = int(np.prod(tables[0].full_shape[1:])) * tables[0].dtype.size
    return int(matrix[rank].sum()) * row_bytes


def _rows_of(partition, shards, pair) -> np.ndarray:
    """Local indices (old layout) of the rows of `shards[pair]`."""
    ranges = [
        np.arange(partition.virtual_rows[v]) + partition.virtual_offsets[v]
        for v in shards.get(pair, ())
    ]
    return np.concatenate(ranges) if ranges else np.zeros(0, np.int64)


def _concat(parts, like) -> tf.Tensor:
    if parts:
        return tf.concat(parts, axis=0)
    return tf.zeros((0, *like.full_shape[1:]), like.dtype)


def _place(tables, targets, moves, received, matrix) -> None:
    """Builds each table's new storage from its kept and received rows.

    `received` holds, by source rank, then table, then virtual shard
    ascending, the rows sent to this worker (the senders' order).
    """
    rank = tables[0].communicator.rank
    size = matrix.shape[0]
    # Where each (table, virtual shard) starts in `received`.
    start, position = 0, {}
    for src in range(size):
        for k, move in enumerate(moves):
            for v in move.shards.get((src, rank), ()):
                position[(k, v)] = start
                start += tables[k].partition.virtual_rows[v]
    for k, (table, new) in enumerate(zip(tables, targets, strict=True)):
        old = table.partition
        old_rows = old.rows_on_shard(rank)
        pieces = []
        for v in new.virtual.shards_of(rank):
            count = new.virtual_rows[v]
            if old.virtual.owners[v] == rank:
                first = old.virtual_offsets[v]
            else:
                first = old_rows + position[(k, v)]
            pieces.append(np.arange(count) + first)
        index = np.concatenate(pieces) if pieces else np.zeros(0, np.int64)
        current = table.read_local_rows(tf.range(old_rows, dtype=tf.int64))
        source = (
            current
            if received is None
            else tf.concat([current, received], axis=0)
        )
        table.take_rows(new, tf.gather(source, index))

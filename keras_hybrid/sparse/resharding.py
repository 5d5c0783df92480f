"""Moves the rows of partitioned tables when the worker set changes.

A table's rows sit in virtual shards that never change (`RowPartition`);
a resize gives some virtual shards new owners (`ShardAssignment.resized`)
and moves them whole, with the same rows of every optimizer slot of the
table. Every worker knows both assignments, so it knows, without asking,
what it sends and receives: the rows travel in one
`Communicator.move_rows` per (dtype, row shape), where only the pairs of
workers that move rows talk (on the TF engine each block is padded to its
own count's ladder step, at least one row), charged to the `"reshard"`
path of `CommStats`, and each `ShardedTable` takes its new rows in place
(the same variable, so Keras layers, optimizers and the router keep their
references). Setting
a table's partition also sets the variables its traced lookups read
(`PartitionLookup`), and traced steps read row counts when they run, so
compiled steps stay valid (`docs/architecture.md`, "Resizing tables").

Nothing here knows how workers are started or how the group was formed:
it runs on whatever `Communicator` it is given.
"""

import dataclasses
import zlib

import numpy as np
import tensorflow as tf
from absl import logging

from keras_hybrid.sharding.shard_assignment import ShardAssignment
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
        engine pads each pair's block, charged to `"padding"`).

    Raises:
        TypeError: If `tables` holds something else than `ShardedTable`s,
            or `new_assignment` is neither an int nor a `ShardAssignment`.
        ValueError: If the new assignment needs more workers than
            `communicator` has, or has other virtual shards than a table.
    """
    tables = _with_slots(tables)
    targets = [_target(t, new_assignment, communicator) for t in tables]
    return _move_all(tables, targets, communicator)["sent"]


def reshard_members(tables, communicator, old_members, new_members) -> dict:
    """Moves rows from the tasks `old_members` onto `new_members`.

    The elastic resize of `ElasticResize`: members are task indices, and a
    worker's rank is its task's index in the sorted member list. A
    collective over the larger of the two groups (the new one for a grow,
    the old one for a shrink), which `communicator` must span. For a grow,
    joiners first take the assignments of the lowest old member (a joiner
    with a lower task may be rank 0 now: `adopt_partitions`) and the
    old members' shards are renumbered to their new ranks; then each
    table takes the balanced assignment onto the new members that moves
    the fewest virtual shards (`ShardAssignment.resized`, with the old
    members in their new rank order and leavers last). After a shrink the
    owners are still ranks of the old group: once the group switched, call
    `rebind_members` with the same members.

    Args:
        tables: Iterable of `ShardedTable` (e.g. `tables_of(strategy)`).
        communicator: The `Communicator` of the larger group.
        old_members: List of ints. Tasks before the resize.
        new_members: List of ints. Tasks after it.

    Returns:
        Dict of ints: `sent`, the row bytes this worker sent; `moved`, the
        row bytes all workers sent; `wire`, the bytes all workers put on
        the wire (`moved` plus the TF engine's padding,
        `Communicator.move_wire_rows`); the same on every worker.

    Raises:
        ValueError: If one list is not a subset of the other (workers
            join or leave, not both), or `communicator` does not span the
            larger group; on every worker of a grow, if some worker has
            other tables (a joiner whose plan differs). Every worker of a
            grow must call it, with tables or without.
    """
    old, new = sorted(old_members), sorted(new_members)
    grow = set(old) <= set(new)
    if not grow and not set(new) <= set(old):
        raise ValueError(
            "A resize either adds or removes workers. Received: "
            f"old_members={old}, new_members={new}."
        )
    group = new if grow else old
    if communicator.size != len(group):
        raise ValueError(
            f"The communicator must span the {len(group)} workers of "
            f"{group}. Received: a communicator of size {communicator.size}."
        )
    tables = _with_slots(tables)
    if grow and len(new) > len(old):
        _check_same_tables(tables, communicator)
    if not tables:
        return {"sent": 0, "moved": 0, "wire": 0}
    if grow:
        rebind_members(tables, communicator, old, new)
        if len(new) > len(old):
            adopt_partitions(tables, communicator, root=new.index(old[0]))
    targets = [member_target(t.partition, group, new) for t in tables]
    return _move_all(tables, targets, communicator)


def rebind_members(tables, communicator, old_members, new_members) -> None:
    """Renumbers the owners of every table from their ranks among
    `old_members` to their ranks among `new_members` (sorted task lists),
    without moving rows; tables use `communicator` afterwards. Not a
    collective. Every owner must be in `new_members`.

    Raises:
        ValueError: If a table has rows on a task that is not in
            `new_members`.
    """
    old, new = sorted(old_members), sorted(new_members)
    for table in _with_slots(tables):
        gone = {
            old[o] for o in table.partition.virtual.owners if old[o] not in new
        }
        if gone:
            raise ValueError(
                f"Table {table.path!r} has rows on tasks {sorted(gone)}, "
                f"which are not among the new members {new}. Move them "
                "first with `reshard_members`."
            )
    ranks = [new.index(t) if t in new else 0 for t in old]
    rebind_tables(tables, communicator, ranks)


def _check_same_tables(tables, communicator) -> None:
    """Raises on every worker if some worker partitioned other tables
    (one all-reduce), instead of leaving the others in a collective that
    has no partner."""
    paths = "\n".join(t.path for t in tables)
    fingerprint = zlib.crc32(paths.encode()) + (len(tables) << 32)
    both = tf.constant([fingerprint, -fingerprint], tf.int64)
    (reduced,) = communicator.all_reduce([both], op="max", path="control")
    high, low = reduced.numpy()
    if high != -low:
        raise ValueError(
            "Workers partition different tables; this one partitions "
            f"{[t.path for t in tables if t.role == 'table']}. A joiner "
            "plans its variables before it knows the group (as one "
            "worker): under --min-np/--max-np name the tables to partition "
            "with HybridStrategy(variable_kinds={...: 'sparse'}), or keep "
            "them dense."
        )


def member_target(partition, group, new_members):
    """`partition` re-balanced onto the tasks `new_members`, moving least.

    Pure: every worker computes the same. `partition`'s owners are ranks
    in `group` (a sorted task list holding every owner and new member);
    so are the returned partition's. The members keep their virtual shards
    up to their new quota (`ShardAssignment.resized`, with the members in
    their new rank order and the tasks of `group` that leave last).

    Example: tasks `[0, 1, 2, 3]` without task 1, 1024 virtual shards:

    ```python
    part = RowPartition.create(4096, 4)
    new = member_target(part, [0, 1, 2, 3], [0, 2, 3])
    new.virtual.counts()   # [342, 0, 341, 341]: only task 1's shards moved
    ```
    """
    return partition.with_assignment(
        member_assignment(partition.virtual, group, new_members)
    )


def member_assignment(assignment, group, new_members) -> ShardAssignment:
    """`assignment` re-balanced onto the tasks `new_members`, moving least.

    Pure, as `member_target`, which applies it to a partition's virtual
    shards: `assignment`'s owners and the result's are ranks in `group`
    (a sorted task list holding every owner and new member).
    """
    new = sorted(new_members)
    leavers = [t for t in group if t not in new]
    logical = [
        new.index(t) if t in new else len(new) + leavers.index(t) for t in group
    ]
    owners = tuple(logical[o] for o in assignment.owners)
    current = ShardAssignment(owners, max(max(owners) + 1, len(new)))
    balanced = current.resized(len(new))
    physical = tuple(group.index(new[o]) for o in balanced.owners)
    return ShardAssignment(physical, max(physical) + 1)


def _move_all(tables, targets, communicator) -> dict:
    """Moves every table to its target; one all-to-all per (dtype, row
    shape). Returns the byte counts of `reshard_members`."""
    for table in tables:
        table.communicator = communicator
    totals = {"sent": 0, "moved": 0, "wire": 0}
    for group in row_groups(tables):
        counts = _move_group(
            [tables[i] for i in group], [targets[i] for i in group]
        )
        for key, value in counts.items():
            totals[key] += value
    logging.info(
        "keras-hybrid: resharded %d tables and slots onto %d workers; "
        "worker %d sent %d bytes, all %d (%d on the wire).",
        len(tables),
        targets[0].num_shards if targets else 0,
        communicator.rank,
        totals["sent"],
        totals["moved"],
        totals["wire"],
    )
    return totals


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
        table.take_rows(
            target, tf.zeros((0, *table.full_shape[1:]), table.dtype)
        )
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


def row_groups(tables) -> list[list[int]]:
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


def _move_group(tables, targets) -> dict:
    """One row move (`Communicator.move_rows`) for tables of one dtype and
    row shape; returns the byte counts of `reshard_members`."""
    comm = tables[0].communicator
    rank, size = comm.rank, comm.size
    moves = [
        _moves(t.partition, new, size)
        for t, new in zip(tables, targets, strict=True)
    ]
    matrix = sum(m.rows for m in moves)
    received = None
    wire_rows = 0
    if matrix.any() and size > 1:
        parts = []
        for dst in range(size):
            for table, move in zip(tables, moves, strict=True):
                index = _rows_of(table.partition, move.shards, (rank, dst))
                if index.size:
                    parts.append(table.read_local_rows(tf.constant(index)))
        send = _concat(parts, tables[0])
        # Every worker knows the matrix: only pairs that move rows talk.
        received, wire_rows = comm.move_rows(send, matrix, path=PATH)
    _place(tables, targets, moves, received, matrix)
    row_bytes = int(np.prod(tables[0].full_shape[1:])) * tables[0].dtype.size
    return {
        "sent": int(matrix[rank].sum()) * row_bytes,
        "moved": int(matrix.sum()) * row_bytes,
        "wire": wire_rows * row_bytes,
    }


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

"""Moves the keys of dynamic tables when the worker set changes.

A key's virtual shard never changes (`KeyOwners`); a resize gives some
virtual shards new owners, the balanced assignment that moves the fewest
(`resharding.member_assignment`, as for static tables), and each key
goes with its virtual shard: its row, its optimizer slot rows, its use
count and last step, and the admission count of a key still waiting
(`table_state`). Every worker knows both assignments but not how many
keys the others hold, so per table one small all-gather (`gather_fixed`)
tells each worker the count matrix and every worker's step and counters;
then the keys travel in one `Communicator.move_rows` for live keys and
one for waiting keys, each key's fields packed as one int32 row, charged
to the `"reshard"` path of `CommStats`. Each worker then holds exactly
the keys of its virtual shards, at rows `0..n-1`, and the table's
`OwnerMap` follows the new assignment (the traced step reads it).

The table's step (the same on every worker that trained) is the largest;
its counters are summed and kept by the new rank 0, so sums over workers
stay the job's totals.

Nothing here knows how workers are started or how the group was formed.
"""

import numpy as np
import tensorflow as tf
from absl import logging

from keras_hybrid.dynamic import table_state
from keras_hybrid.sharding.shard_assignment import ShardAssignment
from keras_hybrid.sparse import resharding

PATH = resharding.PATH


def move_members(tables, comm, group, old_members, new_members) -> dict:
    """Moves every table's keys from the tasks `old_members` onto
    `new_members`.

    A collective over the tasks `group` (sorted; the larger of the two
    member lists), which `comm` spans (a worker's rank is its task's index
    in `group`). Workers that hold no keys yet (joiners) take the
    assignment of the lowest old member first.

    Args:
        tables: List of `DynamicTable`, the same paths on every worker
            (`dynamic_table.tables_with`).
        comm: The `Communicator` of `group`.
        group: List of ints. Tasks `comm` spans.
        old_members: List of ints. Tasks before the resize.
        new_members: List of ints. Tasks after it.

    Returns:
        Dict of ints: `sent`, the bytes this worker sent; `moved`, the
        bytes all workers sent; `wire`, what all workers put on the wire,
        padding included (`Communicator.move_wire_rows`); the last two
        the same on every worker.
    """
    group, old, new = sorted(group), sorted(old_members), sorted(new_members)
    totals = {"sent": 0, "moved": 0, "wire": 0}
    for table in tables:
        current = _adopt(table, comm, group.index(old[0]))
        in_group = ShardAssignment(
            tuple(group.index(old[o]) for o in current.owners), len(group)
        )
        target = resharding.member_assignment(in_group, group, new)
        counts = move_keys(table, comm, target)
        for key, value in counts.items():
            totals[key] += value
        if comm.rank < len(group) and group[comm.rank] in new:
            logical = tuple(new.index(group[o]) for o in target.owners)
            table.owners.update(ShardAssignment(logical, len(new)))
    logging.info(
        "keras-hybrid: moved the keys of %d dynamic tables onto %d "
        "workers; worker %d sent %d bytes, all %d.",
        len(tables),
        len(new),
        comm.rank,
        totals["sent"],
        totals["moved"],
    )
    return totals


def _adopt(table, comm, root: int) -> ShardAssignment:
    """The assignment of worker `root` (ranks among the old members)."""
    mine = np.asarray(table.owners.assignment.owners, np.int32)
    theirs = comm.broadcast(tf.constant(mine), root=root, path="control")
    owners = tuple(int(o) for o in np.asarray(theirs))
    return ShardAssignment(owners, max(owners) + 1)


def move_keys(table, comm, target: ShardAssignment, arrays=None) -> dict:
    """Sends each key of this worker's `table` (or of `arrays`, as
    `table_state.own_arrays` returns) to its owner under `target` (ranks
    of `comm`), and makes what this worker receives its table's state.
    A collective over `comm`.

    Returns:
        Dict of ints: `sent`, `moved` and `wire` bytes, as
        `move_members`.
    """
    slots = table_state.slots_of(table)
    if arrays is None:
        arrays = table_state.own_arrays(table, slots)
    owners = np.asarray(target.owners, np.int64)
    fields = table_state.key_fields(slots)
    parts = (fields, table_state.COUNT_FIELDS)
    dest = [owners[_virtual(table, arrays[names[0]])] for names in parts]
    size = comm.size
    mine = np.concatenate(
        [np.bincount(d, minlength=size)[:size] for d in dest]
        + [arrays[table_state.SCALARS]]
    )
    every = np.asarray(comm.gather_fixed(tf.constant(mine[None, :])))
    received = {}
    sent = moved = wire = 0
    for i, names in enumerate(parts):
        matrix = every[:, i * size : (i + 1) * size]
        order = np.argsort(dest[i], kind="stable")
        packed = _pack([arrays[n][order] for n in names])
        wire_rows = 0
        if matrix.any() and size > 1:
            got, wire_rows = comm.move_rows(
                tf.constant(packed), matrix, path=PATH
            )
            got = np.asarray(got)
        else:
            got = packed
        unpacked = _unpack(got, [arrays[n] for n in names])
        received.update(zip(names, unpacked, strict=True))
        # Keys that stay on their worker do not count.
        width = packed.shape[1] * 4
        rank = comm.rank
        sent += int(matrix[rank].sum() - matrix[rank, rank]) * width
        moved += int(matrix.sum() - np.trace(matrix)) * width
        wire += wire_rows * width
    scalars = every[:, 2 * size :]
    counters = scalars[:, 1:].sum(0) * (comm.rank == 0)
    received[table_state.SCALARS] = np.array(
        [scalars[:, 0].max(), *counters], np.int64
    )
    table_state.load(
        table, slots, received, f"worker {comm.rank} of {comm.size}"
    )
    return {"sent": sent, "moved": moved, "wire": wire}


def _virtual(table, keys: np.ndarray) -> np.ndarray:
    shards = table.owners.virtual_shard_of(tf.constant(keys, tf.int64))
    return np.asarray(shards, np.int64)


def _pack(arrays: list) -> np.ndarray:
    """Int32 `[n, width]`: the bytes of each key's fields, side by side
    (each padded to 4 bytes)."""
    n = len(arrays[0])
    columns = []
    for array in arrays:
        width = array.dtype.itemsize * int(np.prod(array.shape[1:]))
        data = np.ascontiguousarray(array).view(np.uint8).reshape(n, width)
        pad = -data.shape[1] % 4
        columns.append(np.pad(data, ((0, 0), (0, pad))))
    return np.ascontiguousarray(np.concatenate(columns, 1)).view(np.int32)


def _unpack(packed: np.ndarray, like: list) -> list:
    """The arrays `_pack` packed, with the dtypes and row shapes of
    `like`."""
    data = np.ascontiguousarray(packed).view(np.uint8)
    n, out, start = len(data), [], 0
    for array in like:
        width = array.dtype.itemsize * int(np.prod(array.shape[1:]))
        part = np.ascontiguousarray(data[:, start : start + width])
        out.append(part.view(array.dtype).reshape((n, *array.shape[1:])))
        start += width + (-width % 4)
    return out

"""`DynamicShard`: one member's keys of a dynamic table, in a commit.

A commit's store (`file_store`, `buddy_sender`) keeps, per member, one
array per partitioned table and slot; a dynamic table adds one more: the
member's live keys with their rows, optimizer slot rows, use counts and
last steps, the waiting keys' admission counts, the table's step and
counters (`dynamic.table_state`) and the virtual shards' owners, as the
bytes of one `.npz` (uint8). The stores write, send and read it as any
other array: it is whole in each member's file or buddy copy.

After a lost worker (`ElasticRecovery`), `restore` runs on every
survivor: it takes its own keys of the agreed commit and those of the
lost members whose rows it takes (their files or buddy copies, as for
partitioned tables: `buddy_store.taken_arrays`), and sends every key to
its owner among the survivors (`key_moves.move_keys`), under the
balanced assignment that moves the fewest virtual shards from the
commit's. The hash tables of the key index and the admission counts are
made anew first: an eager context reset loses them.

No private hook is touched here.
"""

import io

import numpy as np
import tensorflow as tf

from keras_hybrid.dynamic import dynamic_table
from keras_hybrid.dynamic import key_moves
from keras_hybrid.dynamic import table_state
from keras_hybrid.elastic import buddy_store
from keras_hybrid.sharding.shard_assignment import ShardAssignment
from keras_hybrid.sparse import resharding

# Suffix of a dynamic table's path among a commit's tables.
_SUFFIX = ":keys"
_OWNERS = "owners"


class DynamicShard:
    """A dynamic table as a commit's store takes it.

    Args:
        table: `DynamicTable` of this worker.
    """

    partition = None  # no rows at fixed places: keys

    def __init__(self, table) -> None:
        self.table = table
        self.path = table.name + _SUFFIX

    def stored_tensor_shared(self) -> np.ndarray:
        """This worker's keys and their state, as the bytes of an `.npz`."""
        table = self.table
        # Taken while `fit` runs, after the step was traced.
        slots = table_state.slots_of(table, traced=True)
        arrays = table_state.own_arrays(table, slots)
        arrays[_OWNERS] = np.asarray(table.owners.assignment.owners, np.int32)
        f = io.BytesIO()
        np.savez(f, **arrays)
        return np.frombuffer(f.getvalue(), np.uint8)


def shards_of(communicator) -> list[DynamicShard]:
    """A `DynamicShard` per dynamic table spread over `communicator`."""
    return [DynamicShard(t) for t in dynamic_table.tables_with(communicator)]


def restore(communicator, copy: dict, survivors, task: int) -> dict:
    """Restores every dynamic table from the commit of tables `copy` and
    moves its keys onto `survivors` (a collective over them; the
    communicator's group). Returns `sent`, `moved` and `wire` bytes
    (`key_moves.move_members`).

    Raises:
        ValueError: If a table is not in the commit (the model changed).
    """
    index = {c.path: i for i, c in enumerate(copy["tables"])}
    lost = buddy_store.taken_arrays(copy, survivors, task)
    totals = {"sent": 0, "moved": 0, "wire": 0}
    for table in dynamic_table.tables_with(communicator):
        path = table.name + _SUFFIX
        if path not in index:
            raise ValueError(
                f"The commit holds no keys of dynamic table {table.name!r}. "
                "A model must not create tables during elastic training."
            )
        entry = copy["tables"][index[path]]
        table.renew_index()
        parts = [_decode(entry.own)]
        parts += [_decode(a) for _, a in sorted(lost[index[path]].items())]
        parts = [p for p in parts if p is not None]
        owners = _agree_owners(communicator, parts, table.owners.num_virtual)
        target = _target(owners, copy["members"], survivors)
        counts = key_moves.move_keys(
            table, communicator, target, _merged(table, parts)
        )
        table.owners.update(target)
        for key, value in counts.items():
            totals[key] += value
    return totals


def _decode(array: np.ndarray) -> dict | None:
    """The arrays of a `DynamicShard`, or None for an empty one (a
    survivor that lacks the commit: its layout holds no keys)."""
    if not array.size:
        return None
    with np.load(io.BytesIO(np.asarray(array).tobytes())) as data:
        return {name: data[name] for name in data.files}


def _agree_owners(comm, parts: list, num_virtual: int) -> tuple:
    """The commit's owners (ranks among its members), from the lowest
    survivor that holds the commit (a joiner admitted after it does not:
    one all-reduce, then a broadcast)."""
    holds = bool(parts)
    lowest = comm.all_reduce(
        [tf.constant([-comm.rank if holds else -comm.size], tf.int64)],
        op="max",
        path="control",
    )[0]
    root = -int(np.asarray(lowest)[0])
    mine = parts[0][_OWNERS] if holds else np.zeros([num_virtual], np.int32)
    owners = comm.broadcast(tf.constant(mine), root=root, path="control")
    return tuple(int(o) for o in np.asarray(owners))


def _target(owners: tuple, members, survivors) -> ShardAssignment:
    """The balanced assignment onto `survivors` (their ranks) that moves
    the fewest virtual shards from `owners` (ranks among `members`)."""
    members, survivors = sorted(members), sorted(survivors)
    group = sorted(set(members) | set(survivors))
    current = ShardAssignment(
        tuple(group.index(members[o]) for o in owners), len(group)
    )
    moved = resharding.member_assignment(current, group, survivors)
    return ShardAssignment(
        tuple(survivors.index(group[o]) for o in moved.owners),
        len(survivors),
    )


def _merged(table, parts: list) -> dict:
    """One set of arrays from the commit's `parts` (this survivor's keys
    and the lost members' it takes): keys and waiting keys side by side,
    the largest step, the counters summed."""
    empty = table_state.own_arrays(table, table_state.slots_of(table))
    if not parts:
        empty[table_state.SCALARS] = np.zeros_like(empty[table_state.SCALARS])
        return empty
    merged = {
        name: np.concatenate([p[name] for p in parts])
        for name in empty
        if name != table_state.SCALARS
    }
    scalars = np.stack([p[table_state.SCALARS] for p in parts])
    merged[table_state.SCALARS] = np.array(
        [scalars[:, 0].max(), *scalars[:, 1:].sum(0)], np.int64
    )
    return merged

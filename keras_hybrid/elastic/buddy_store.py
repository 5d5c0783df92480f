"""Buddy copies: a commit of partitioned tables that survives a lost worker.

Every member keeps, at each commit (`ElasticCommit`), its own rows of every
partitioned table and optimizer slot in host memory (numpy), and a *buddy
copy* of the rows of each of the `copies` members before it in ring order
(with one copy, rank `r` holds rank `r - 1`'s; rank 0 holds the last
one's). The copies travel in one `Communicator.move_rows` per (dtype, row
shape), each member sending its whole shard to each of the next `copies`
members (only those talk). Whole shards, not the rows changed since the
last commit: Adam's and most optimizers' slots decay every row at every
step.

After a lost worker (`ElasticRecovery`), each survivor restores its own
rows of the agreed commit, and the first surviving member of the `copies`
after each lost one takes the lost one's virtual shards from its buddy
copy. The tables are then re-balanced over the survivors with the
minimal-movement path of `resharding.reshard_members`. A commit cannot
bring back a lost worker whose `copies` next members were lost too (with
one copy: two neighbours in ring order, since the commit; with two: three
in a row).

No private hook is touched here (new storage goes through `_compat`).
"""

import numpy as np
import tensorflow as tf

from keras_hybrid._compat import keras as keras_compat
from keras_hybrid._compat import tf as tf_compat
from keras_hybrid.elastic import file_store
from keras_hybrid.elastic.file_store import TableCopy
from keras_hybrid.sharding.shard_assignment import ShardAssignment
from keras_hybrid.sparse import resharding
from keras_hybrid.sparse.sharded_table import ShardedTable

PATH = "commit"


def take(tables, communicator, members, copies: int = 1) -> dict | None:
    """Copies `tables` (with their slots) and the buddy rows (a collective
    over `members`, at a step boundary).

    Args:
        tables: `ShardedTable`s and slots (`resharding.tables_of`).
        communicator: The `Communicator` of `members`.
        members: List of ints. The current member tasks, sorted; a rank is
            an index in it.
        copies: Int. How many next members keep a copy of each member's
            rows (at most the other members). Defaults to `1`.

    Returns:
        `{"members": [...], "tables": [TableCopy, ...], "bytes": int,
        "copies": int}` (bytes this member sent), or None without tables.
    """
    tables = list(tables)
    if not tables:
        return None
    rank = communicator.rank
    copies = max(1, min(int(copies), len(members) - 1))
    own: dict = {}
    buddies: dict = {}
    sent = 0
    for group in resharding.row_groups(tables):
        mine, received = _send_to_next(
            [tables[i] for i in group], communicator, copies
        )
        for k, i in enumerate(group):
            own[i] = mine[k]
            buddies[i] = {
                members[source]: rows[k] for source, rows in received.items()
            }
        sent += copies * sum(_local_bytes(tables[i], rank) for i in group)
    copied = [
        TableCopy(
            path=t.path, partition=t.partition, own=own[i], buddy=buddies[i]
        )
        for i, t in enumerate(tables)
    ]
    return {
        "members": list(members),
        "tables": copied,
        "bytes": sent,
        "copies": copies,
    }


def _local_bytes(table, shard: int) -> int:
    row = int(np.prod(table.full_shape[1:])) * table.dtype.size
    return table.partition.rows_on_shard(shard) * row


def _send_to_next(tables, communicator, copies: int) -> tuple:
    """Sends this member's rows of `tables` to each of the next `copies`
    ranks; returns this member's rows of each table, and `{source rank:
    its rows of each table}` for the `copies` ranks before it, as numpy
    arrays (views of one snapshot each: every variable is read once)."""
    size, rank = communicator.size, communicator.rank
    shard_rows = [
        sum(t.partition.rows_on_shard(s) for t in tables) for s in range(size)
    ]
    # Every member knows every shard's rows: only the ranks that keep
    # copies talk, each block at its own ladder step (no padding to the
    # largest shard).
    matrix = np.zeros((size, size), np.int64)
    for s in range(size):
        for k in range(1, copies + 1):
            matrix[s, (s + k) % size] += shard_rows[s]
    rows = tf.concat([t.stored_tensor() for t in tables], axis=0)
    # The same rows to every destination (grouped by destination rank).
    send = tf.concat([rows] * copies, axis=0) if copies > 1 else rows
    received, _ = communicator.move_rows(send, matrix, path=PATH)
    sources = sorted((rank - k) % size for k in range(1, copies + 1))
    blocks = tf.split(received, [shard_rows[s] for s in sources])
    return _split(rows, tables, rank), {
        s: _split(block, tables, s)
        for s, block in zip(sources, blocks, strict=True)
    }


def _split(rows, tables, shard: int) -> list:
    """`rows` (a tensor of `tables`' rows on `shard`, one after the other)
    as one numpy array per table."""
    counts = np.cumsum([t.partition.rows_on_shard(shard) for t in tables])
    return np.split(rows.numpy(), counts[:-1])


def check_survivable(copy: dict | None, survivors) -> None:
    """Raises unless every lost member of the commit `copy` has a
    surviving buddy (one of the next `copies` members in ring order).

    Deterministic: every survivor holding the commit raises alike.

    Raises:
        NotImplementedError: If all buddies of a lost member were lost too.
    """
    if copy is None:
        return
    members = copy["members"]
    gone = [t for t in members if t not in survivors]
    if "folder" in copy:  # a file store: every member's file is readable
        for task in gone:
            file_store.read_rows(copy, task, check_only=True)
        return
    copies = copy.get("copies", 1)
    unrecoverable = [
        t for t in gone if _holder(members, t, survivors, copies) is None
    ]
    if not unrecoverable:
        return
    tables = sorted({c.path for c in copy["tables"]})
    buddies = sorted(
        {b for t in unrecoverable for b in _buddies(members, t, copies)}
    )
    kept = "1 buddy copy" if copies == 1 else f"{copies} buddy copies"
    raise NotImplementedError(
        "keras-hybrid elastic: the rows of partitioned tables on tasks "
        f"{unrecoverable} are lost: their buddy copies were on tasks "
        f"{buddies}, lost as well since the last commit (members then: "
        f"{members}, survivors: {sorted(survivors)}). A commit with {kept} "
        f"survives any {copies} lost at once, or more if no {copies + 1} "
        f"of them are neighbours in task order. Partitioned: {tables}. "
        "Keep more copies (keras-hybrid-run --buddy-copies), keep tables "
        "replicated with HybridStrategy(variable_kinds={'.*': 'dense'}), "
        "commit them to files (--commit-store served, or directory with a "
        "shared --commit-dir), or restart from a checkpoint."
    )


def _buddies(members: list, task: int, copies: int) -> list:
    """The tasks that hold buddy copies of `task`'s rows: the next
    `copies` members in ring order."""
    i = members.index(task)
    return [members[(i + k) % len(members)] for k in range(1, copies + 1)]


def _holder(members: list, task: int, survivors, copies=None) -> int | None:
    """The survivor that takes lost `task`'s rows: the first surviving one
    of its `copies` buddies, or (a file store, `copies` None) the next
    surviving member. None if there is none."""
    i = members.index(task)
    reach = len(members) - 1 if copies is None else copies
    for k in range(1, reach + 1):
        holder = members[(i + k) % len(members)]
        if holder in survivors:
            return holder
    return None


def restored_rows(
    copy: TableCopy, members, survivors, task, lost=None, copies: int = 1
):
    """The partition over `survivors` (ranks are indices in the sorted
    list) in which each lost member's virtual shards belong to its holder
    (`_holder`), and this survivor's rows under it (local order).

    Pure. `members` are the commit's tasks; `task` is this survivor.
    `lost` (a file store) maps each lost task this survivor holds to its
    rows of the table, and a lost task's holder is the next surviving
    member; without it the rows come from the buddy copies (`copy.buddy`),
    and the holder is the first surviving of the next `copies` members.
    """
    survivors = sorted(survivors)
    reach = None if lost is not None else copies
    if lost is None:
        lost = copy.buddy or {}
    old = copy.partition
    owners = []
    for v_owner in old.virtual.owners:
        owner = members[v_owner]
        if owner not in survivors:
            owner = _holder(members, owner, survivors, reach)
        owners.append(survivors.index(owner))
    partition = old.with_assignment(
        ShardAssignment(tuple(owners), len(survivors))
    )
    rank = survivors.index(task)
    pieces = []
    for v in partition.virtual.shards_of(rank):
        owner = members[old.virtual.owners[v]]
        source = copy.own if owner == task else lost[owner]
        first = old.virtual_offsets[v]
        pieces.append(source[first : first + old.virtual_rows[v]])
    empty = np.zeros((0, *copy.own.shape[1:]), copy.own.dtype)
    rows = np.concatenate(pieces) if pieces else empty
    return partition, rows


def _lost_rows(copy: dict, survivors, task) -> list | None:
    """For a file store, per table of `copy`: `{lost task: rows}`
    for the lost members `task` takes over (read from their files)."""
    if "folder" not in copy:
        return None
    members = copy["members"]
    lost = [[] for _ in copy["tables"]]
    for gone in members:
        if gone in survivors or _holder(members, gone, survivors) != task:
            continue
        rows = file_store.read_rows(copy, gone)
        for i, table_rows in enumerate(rows):
            lost[i].append((gone, table_rows))
    return [dict(pairs) for pairs in lost]


def restore(strategy, variables, copy: dict, survivors, task) -> dict:
    """Gives the partitioned `variables` (Keras variables whose storage is
    a `ShardedTable`) new storage holding the commit `copy`, then
    re-balances them over `survivors` (a collective over them).

    Returns:
        The byte counts of `resharding.reshard_members`.

    Raises:
        ValueError: If a table is not in the commit (the model changed).
    """
    check_survivable(copy, survivors)
    by_path = {c.path: c for c in copy["tables"]}
    lost = _lost_rows(copy, survivors, task)
    index = {c.path: i for i, c in enumerate(copy["tables"])}
    comm = strategy.communicator
    router = strategy.extended.router
    replaced = {}
    for variable in variables:
        old = variable.value
        if old.path not in by_path:
            raise ValueError(
                f"The commit holds no rows of partitioned table {old.path!r}"
                ". A model must not create variables during elastic training."
            )
        partition, rows = restored_rows(
            by_path[old.path],
            copy["members"],
            survivors,
            task,
            None if lost is None else lost[index[old.path]],
            copy.get("copies", 1),
        )
        new = _new_storage(strategy, variable, old, partition, rows)
        replaced[id(old)] = (old, new)
        router.replace_table(old, new)
    for old, new in replaced.values():
        for slot in old.live_slots():
            if id(slot) in replaced:
                new.add_slot(replaced[id(slot)][1])
    tables = resharding.tables_of(strategy)
    members = sorted(survivors)
    return resharding.reshard_members(tables, comm, members, members)


def _new_storage(strategy, variable, old, partition, rows) -> ShardedTable:
    """A `ShardedTable` like `old`, in the current context, holding `rows`
    under `partition`; made the storage of Keras `variable`."""
    with tf.init_scope():
        new = ShardedTable(
            path=old.path,
            full_shape=old.full_shape,
            partition=partition,
            communicator=strategy.communicator,
            role=old.role,
            initial_value=rows,
            shape=tf.TensorShape([None, *old.full_shape[1:]]),
            trainable=old.trainable,
            name=old.name.split(":")[0],
            dtype=old.dtype,
            distribute_strategy=strategy,
        )
    new.row_constraint = old.row_constraint
    new.on_whole_read = old.on_whole_read
    tf_compat.keep_variable_key(new, old)
    keras_compat.set_variable_storage(variable, new)
    if old.role == "table":
        variable.sparse_read = new.sparse_read
    return new

"""Buddy copies: a commit of partitioned tables that survives a lost worker.

Every member keeps, at each commit (`ElasticCommit`), its own rows of every
partitioned table and optimizer slot in host memory (numpy), and a *buddy
copy* of the rows of each of the `copies` members before it in ring order
(with one copy, rank `r` holds rank `r - 1`'s; rank 0 holds the last
one's). Each member sends its whole shard to each of the next `copies`
members over TCP from a background thread (`buddy_sender.BuddySender`);
each keeps what it receives in memory (`contract.buddy_receiver`), whole
copies only. Whole shards, not the rows changed since the last commit:
Adam's and most optimizers' slots decay every row at every step.

A commit is restorable over some survivors when the survivor that takes
each lost member's rows holds that member's whole copy (`restorable`):
a member that died while sending its copy leaves the commit before it.

After a lost worker (`ElasticRecovery`), each survivor restores its own
rows of the agreed commit, and the first surviving member of the `copies`
after each lost one takes the lost one's virtual shards from its buddy
copy. The tables are then re-balanced over the survivors with the
minimal-movement path of `resharding.reshard_members`. A commit cannot
bring back a lost worker whose `copies` next members were lost too (with
one copy: two neighbours in ring order, since the commit; with two: three
in a row).

The file stores (`file_store`) restore through the same functions: there
the next surviving member reads a lost member's rows from its file.

No private hook is touched here (new storage goes through `_compat`).
"""

import dataclasses

import numpy as np
import tensorflow as tf

from keras_hybrid._compat import keras as keras_compat
from keras_hybrid._compat import tf as tf_compat
from keras_hybrid.contract import commit_blob
from keras_hybrid.elastic import file_store
from keras_hybrid.elastic.file_store import TableCopy
from keras_hybrid.sharding.shard_assignment import ShardAssignment
from keras_hybrid.sparse import resharding
from keras_hybrid.sparse.sharded_table import ShardedTable


def is_file_store(copy: dict) -> bool:
    """Whether the commit of tables `copy` is a file store's (every
    member's rows in a file any survivor reads), not buddy copies."""
    return "folder" in copy and "copies" not in copy


def restorable(copy: dict | None, survivors, task: int) -> bool:
    """Whether survivor `task` can restore its part of the commit of
    tables `copy` over `survivors`: for buddy copies, it holds the whole
    copy of every lost member whose rows it takes (a member may die while
    sending it); for a file store, every lost member's file is there (the
    same on every survivor, `file_store.complete`)."""
    if copy is None or "folder" not in copy:  # copies in `TableCopy.buddy`
        return True
    if is_file_store(copy):
        return file_store.complete(copy, survivors)
    received = copy.get("files")
    taken = _taken(copy, survivors, task)
    if received is None:
        return not taken
    return all(received.exists(copy["folder"], t) for t in taken)


def _taken(copy: dict, survivors, task: int) -> list:
    """The lost members of `copy` whose rows survivor `task` takes."""
    members = copy["members"]
    copies = copy.get("copies") if not is_file_store(copy) else None
    return [
        t
        for t in members
        if t not in survivors and _holder(members, t, survivors, copies) == task
    ]


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
    if is_file_store(copy):  # every member's file is readable
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
    """Per table of `copy`: `{lost task: rows}` for the lost members
    `task` takes over, read from their files (a file store) or from the
    buddy copies it received; None for copies held in `TableCopy.buddy`.

    Raises:
        NotImplementedError: If a file or a received copy is missing.
    """
    if "folder" not in copy:
        return None
    lost = [{} for _ in copy["tables"]]
    for gone in _taken(copy, survivors, task):
        if is_file_store(copy):
            rows = file_store.read_rows(copy, gone)
        else:
            rows = _received_rows(copy, gone)
        for i, table_rows in enumerate(rows):
            lost[i][gone] = table_rows
    return lost


def taken_arrays(copy: dict, survivors, task) -> list[dict]:
    """Per entry of the commit `copy` (in order): `{lost task: its array}`
    for the lost members whose rows survivor `task` takes, from their
    files, the buddy copies it received, or those it holds.

    Raises:
        NotImplementedError: If a file or a received copy is missing.
    """
    lost = _lost_rows(copy, survivors, task)
    if lost is not None:
        return lost
    members = copy["members"]
    copies = copy.get("copies", 1)
    taken = [
        t
        for t in members
        if t not in survivors and _holder(members, t, survivors, copies) == task
    ]
    return [{t: c.buddy[t] for t in taken} for c in copy["tables"]]


def _received_rows(copy: dict, task: int) -> list:
    """`task`'s rows of each table of the buddy commit `copy`, from the
    copy this worker received."""
    received = copy.get("files")
    data = None if received is None else received.read(copy["folder"], task)
    if data is None:
        raise NotImplementedError(
            f"keras-hybrid elastic: the rows of partitioned tables on task "
            f"{task} are lost: its buddy copy of {copy['folder']} did not "
            "arrive whole (the task died while sending it). Restart from "
            "a checkpoint, or commit to files (--commit-store directory "
            "or served)."
        )
    return commit_blob.read_blob(data)


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
    lost = _lost_rows(copy, survivors, task)
    copies = None if is_file_store(copy) else copy.get("copies", 1)
    tables = copy["tables"]
    if lost is not None and copies is not None:
        # Buddy copies received over TCP: restored as copies held.
        tables = [
            dataclasses.replace(c, buddy=rows)
            for c, rows in zip(tables, lost, strict=True)
        ]
        lost = None
    by_path = {c.path: c for c in tables}
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
            copies or 1,
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
    # Gathers of the Keras variable read its storage of the moment
    # (`keras_gathers.read_rows_through`).
    keras_compat.set_variable_storage(variable, new)
    return new

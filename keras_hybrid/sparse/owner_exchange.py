"""Rows of several tables' unique ids from the workers that hold them.

The packed exchange of a step (`fused_exchange`): one control collective
agrees on the count of every (worker, table) pair and shares bad-id flags
(`Communicator.plan_packed_exchange`); one id all-to-all carries the ids
of all tables, packed per peer (grouped by destination, then table); the
destination answers with one all-to-all per dtype, every row flattened to
its elements so that tables of different widths share a block; backward,
one push all-to-all per dtype returns the gradients (`lookup.send_back`).

The destination is each id's owner (`rows_of`), or, in a hierarchical
exchange, a worker of the same host that relays for the owner
(`hierarchical_exchange`): both pack with `Sent` and answer with `Asked`.
"""

import math

import numpy as np
import tensorflow as tf

from keras_hybrid.sparse import hot_rows
from keras_hybrid.sparse import lookup

_MAX_FLAG_BITS = 30


def rows_of(comm, tables, uniques, peers=None) -> list:
    """Rows of each table's unique ids (`[u, *row]` per table), from their
    owners, in one id exchange and one row exchange per dtype.

    Args:
        comm: The `Communicator`.
        tables: List of `ShardedTable`s.
        uniques: List of int64 vectors, one per table, without repeats.
        peers: Optional tuple of ranks (this worker included) that own all
            of `uniques`; the exchanges talk to them only. Defaults to
            `None`: every worker.
    """
    sent = Sent(comm, tables, uniques)
    groups = dtype_groups(tables)
    weights = [_ones(tables)] + [tf.constant(u, tf.int32) for _, u in groups]

    def checks(flags):
        return [
            lookup.check_ids(t, table_flags(flags, i), sent.bad_ids[i])
            for i, t in enumerate(tables)
        ]

    if peers is None:
        # An engine may send the counts with the ids (Horovod).
        plans, recv_parts, asked = comm.exchange_packed_ids(
            sent.payload, sent.part_counts, sent.flag, weights, checks
        )
    else:
        plans, recv_parts = comm.plan_packed_exchange(
            sent.part_counts, sent.flag, weights
        )
        with tf.control_dependencies(checks(plans[0].flags)):
            local_ids = tf.identity(sent.payload)
        asked, _ = _exchange(comm, local_ids, plans[0], peers)
    owner = Asked(comm, len(tables), asked, recv_parts)
    comm.stats.record_rows_served(tf.shape(asked)[0])
    for table, mine in zip(tables, owner.asked, strict=True):
        hot_rows.count_served(table, mine)
    rows = [
        lookup.read_rows(t, mine)
        for t, mine in zip(tables, owner.asked, strict=True)
    ]
    return sent.receive(comm, groups, plans[1:], owner, rows, peers)


def _exchange(comm, tensor, plan, peers):
    if peers is None:
        return comm.all_to_all(tensor, plan.send_counts, "ids", plan)
    return comm.all_to_all_among(tensor, plan.send_counts, peers, "ids", plan)


def _ones(tables) -> tf.Tensor:
    return tf.ones([len(tables)], tf.int32)


def _width(table) -> int:
    return int(np.prod(table.full_shape[1:], dtype=np.int64))


def dtype_groups(tables) -> list:
    """`(unit, units)` per dtype: the tables of one dtype move as rows of
    `unit` elements (the gcd of their widths, so tables of one width move
    whole rows), `units[t]` per row of table `t` (0 for other dtypes)."""
    dtypes = list(dict.fromkeys(t.dtype.base_dtype for t in tables))
    groups = []
    for dtype in dtypes:
        widths = [
            _width(t) if t.dtype.base_dtype == dtype else 0 for t in tables
        ]
        unit = math.gcd(*widths)
        groups.append((unit, [w // unit for w in widths]))
    return groups


def table_flags(flags, i):
    """Int flags of table `i`, one per worker, from the packed flags."""
    bit = min(i, _MAX_FLAG_BITS)
    return tf.bitwise.bitwise_and(tf.bitwise.right_shift(flags, bit), 1)


def _owner_of(table, unique):
    return table.shard_of_tensor(unique)


def _local_index(table, unique):
    return table.local_index_tensor(unique)


class Sent:
    """The asking side: its unique ids of all tables, packed by
    destination then table, and how to unpack the rows that come back.

    Args:
        comm: The `Communicator`.
        tables: List of tables.
        uniques: List of int64 unique ids, one vector per table.
        dest: Function `(table, unique) -> int32 ranks`: where each id is
            sent. Defaults to its owner.
        payload: Function `(table, unique) -> int64`: what is sent for each
            id. Defaults to its row in the owner's shard.
    """

    def __init__(
        self, comm, tables, uniques, dest=_owner_of, payload=_local_index
    ) -> None:
        n, size = len(tables), comm.size
        pairs = list(zip(tables, uniques, strict=True))
        self.sizes = [tf.size(u) for u in uniques]
        table_of = tf.concat(
            [tf.fill([s], i) for i, s in enumerate(self.sizes)], axis=0
        )
        to = tf.concat([dest(t, u) for t, u in pairs], axis=0)
        key = to * n + table_of
        self.order = tf.argsort(key, stable=True)
        self.table_of = tf.gather(table_of, self.order)  # sorted rows
        counts = tf.math.bincount(
            key, minlength=size * n, maxlength=size * n, dtype=tf.int32
        )
        self.part_counts = tf.reshape(counts, [size, n])
        sent = tf.concat([payload(t, u) for t, u in pairs], axis=0)
        self.payload = tf.gather(sent, self.order)
        bad = [(u < 0) | (u >= t.full_shape[0]) for t, u in pairs]
        self.bad_ids = [
            tf.boolean_mask(u, b) for u, b in zip(uniques, bad, strict=True)
        ]
        self.flag = tf.add_n(
            [
                tf.bitwise.left_shift(
                    tf.cast(tf.reduce_any(b), tf.int32), min(i, _MAX_FLAG_BITS)
                )
                for i, b in enumerate(bad)
            ]
        )
        self.tables = tables

    def receive(self, comm, groups, plans, asked, rows, peers=None) -> list:
        """Sends `rows` (per table, the rows of `asked.asked`) back to where
        their ids came from, one exchange per dtype group, and returns
        each of this worker's tables' unique rows."""
        unique_rows: list = [None] * len(self.tables)
        for (unit, units), plan in zip(groups, plans, strict=True):
            back = lookup.send_back(
                comm, asked.units(rows, unit, units), plan.reversed(), peers
            )
            for i, got in self.unpack(back, units).items():
                unique_rows[i] = got
        return unique_rows

    def unpack(self, back, units: list) -> dict:
        """`{table index: unique rows}` of the tables with `units > 0`,
        from `back`, the units returned for the sorted rows."""
        row_units = tf.gather(tf.constant(units, tf.int32), self.table_of)
        starts = tf.cumsum(row_units, exclusive=True)
        # Sorted position of each unique row, tables in order.
        where = tf.math.invert_permutation(self.order)
        out, offset = {}, tf.constant(0, tf.int32)
        for i, table in enumerate(self.tables):
            rows = self.sizes[i]
            if units[i] > 0:
                mine = tf.gather(starts, where[offset : offset + rows])
                out[i] = tf.reshape(
                    tf.gather(back, _unit_range(mine, units[i])),
                    [-1, *table.full_shape[1:]],
                )
            offset += rows
        return out


def _unit_range(starts, count: int):
    """Indices of `count` consecutive units from each of `starts`."""
    if count == 1:
        return starts
    steps = tf.range(count, dtype=starts.dtype)
    return tf.reshape(starts[:, None] + steps[None, :], [-1])


class Asked:
    """The answering side: the ids asked of it, split by table.

    Args:
        comm: The `Communicator`.
        num_tables: Int. Tables packed in each block.
        asked: The ids received, by source worker, then table.
        recv_parts: Int `[size, tables]`: how many came per (worker,
            table).
    """

    def __init__(self, comm, num_tables, asked, recv_parts) -> None:
        n = num_tables
        labels = tf.repeat(
            tf.tile(tf.range(n), [comm.size]), tf.reshape(recv_parts, [-1])
        )
        self.labels = labels
        self.where = [tf.where(labels == i)[:, 0] for i in range(n)]
        ranks = [tf.range(tf.size(w, tf.int64)) for w in self.where]
        # Rank of each asked row among its table's rows.
        self.rank = tf.dynamic_stitch(
            [tf.cast(w, tf.int32) for w in self.where], ranks
        )
        self.asked = [tf.gather(asked, w) for w in self.where]

    def units(self, rows: list, unit: int, units: list) -> tf.Tensor:
        """`rows` (per table, one row per id of `self.asked`) of the tables
        with `units > 0`, as `unit`-element rows, in the order asked (by
        worker, then table)."""
        parts, bases, base = [], [], tf.constant(0, tf.int64)
        for i, table_rows in enumerate(rows):
            bases.append(base)
            if units[i] == 0:
                continue
            parts.append(tf.reshape(table_rows, [-1, unit]))
            base += tf.shape(parts[-1], tf.int64)[0]
        buffer = tf.concat(parts, axis=0)
        row_units = tf.gather(tf.constant(units, tf.int64), self.labels)
        start = tf.gather(tf.stack(bases), self.labels) + self.rank * row_units
        if len(set(units)) == 1:  # one width, all tables
            return tf.gather(buffer, start)
        keep = row_units > 0
        start, row_units = start[keep], row_units[keep]
        idx = tf.ragged.range(start, start + row_units).flat_values
        return tf.gather(buffer, idx)

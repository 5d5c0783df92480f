"""One id exchange, one pull and one push per step for all lookups.

`lookup.pull` exchanges each lookup on its own: a count exchange, an id
all-to-all, a row all-to-all and, backward, a push all-to-all per table
and call. When the ids of a step's lookups are known before the model runs
(`prefetch`), the step instead moves them all at once, at its first
lookup:

1. per table, the ids of all its calls are deduplicated together; one
   control collective agrees on the count of every (worker, table) pair
   (`Communicator.plan_packed_exchange`) and shares bad-id flags;
2. one id all-to-all carries the ids of all tables, packed per peer
   (grouped by owner, then table); an engine whose all-to-all takes
   unequal splits sends steps 1 and 2 as one (`exchange_packed_ids`);
3. each owner gathers its rows of each table and sends them back in one
   all-to-all per dtype, every row flattened to its elements so that
   tables of different widths share a block;
4. backward, one push all-to-all per dtype returns the gradients, which
   the owner splits into each table's gradient (`table_gradients.make`).

Each lookup then takes its rows by `(table, call index)`, after a run-time
check that its ids are the prefetched ones.
"""

import contextlib
import math

import numpy as np
import tensorflow as tf
from absl import logging

from keras_hybrid.sparse import hot_rows
from keras_hybrid.sparse import lookup

_steps: list = []
_MAX_FLAG_BITS = 30


@contextlib.contextmanager
def step(plan, ids: list, communicator):
    """Within, gathers of the tables of `plan` take their rows from one
    exchange; `ids` are the prefetched calls' ids, in `plan` order."""
    _steps.append(_Step(plan, ids, communicator))
    try:
        yield
    finally:
        _steps.pop()


def take(table, ids):
    """Rows of `table` for `ids` from the step's fused exchange, or `None`
    if this gather keeps its own exchange."""
    if not _steps:
        return None
    return _steps[-1].take(table, ids)


class _Step:
    """The fused exchange of one traced step (see the module docstring)."""

    def __init__(self, plan, ids, communicator) -> None:
        self._comm = communicator
        calls = plan.prefetched()
        self._keys = [(id(c.table), c.index) for c in calls]
        self._tables = [c.table for c in calls]
        self._ids = dict(zip(self._keys, ids, strict=True))
        self._counts: dict = {}
        self._rows = None
        self._graph = None

    def take(self, table, ids):
        index = self._counts.get(id(table), 0)
        self._counts[id(table)] = index + 1
        key = (id(table), index)
        if key not in self._ids:
            return None
        graph = tf.compat.v1.get_default_graph()
        if self._rows is None:
            calls = [
                (t, self._ids[k])
                for t, k in zip(self._tables, self._keys, strict=True)
            ]
            rows = exchange(self._comm, calls)
            self._rows = dict(zip(self._keys, rows, strict=True))
            self._graph = graph
        elif graph is not self._graph:
            logging.info(
                "keras-hybrid: a lookup of %r runs in another graph than "
                "the step's fused exchange; it exchanges on its own.",
                table.path,
            )
            return None
        ahead = self._ids[key]
        ids = tf.cast(tf.convert_to_tensor(ids), tf.int64)
        if not ids.shape.is_compatible_with(ahead.shape):
            logging.info(
                "keras-hybrid: lookup %d of %r has ids of shape %s, not "
                "%s as found ahead; it exchanges on its own.",
                index,
                table.path,
                ids.shape,
                ahead.shape,
            )
            return None
        check = tf.debugging.assert_equal(
            ids,
            tf.cast(ahead, tf.int64),
            message=(
                f"The ids of lookup {index} of table {table.path!r} differ "
                "from the ids computed before the step. Turn off fused "
                "exchanges with `strategy.extended.fuse_lookups = False` "
                "and report the model."
            ),
        )
        with tf.control_dependencies([check]):
            return tf.identity(self._rows[key])


def exchange(comm, calls: list) -> list:
    """Rows of every `(table, ids)` call, shaped `ids.shape + row`, moved
    in one id exchange and one row exchange per dtype."""
    by_id = {id(t): t for t, _ in calls}  # variables are unhashable
    tables = list(by_id.values())
    t_of = {key: i for i, key in enumerate(by_id)}
    for table, ids in calls:
        if not ids.dtype.is_integer:
            raise TypeError(
                f"Ids looked up in partitioned table {table.path!r} must "
                f"be integers. Received: ids.dtype={ids.dtype.name}"
            )
    per_table = [[c for c in calls if c[0] is t] for t in tables]
    all_uniques, positions = zip(*[_dedupe(c) for c in per_table], strict=True)
    uniques, hot = _split_hot(tables, all_uniques)
    sent = _Sent(comm, tables, uniques)
    groups = _dtype_groups(tables)
    plans, recv_parts, asked = comm.exchange_packed_ids(
        sent.local_ids,
        sent.part_counts,
        sent.flag,
        [_ones(tables)] + [tf.constant(u, tf.int32) for _, u in groups],
        lambda flags: [
            lookup.check_ids(t, _table_flags(flags, i), sent.bad_ids[i])
            for i, t in enumerate(tables)
        ],
    )
    owner = _Owner(comm, tables, asked, recv_parts)
    unique_rows: list = [None] * len(tables)
    for (unit, units), plan in zip(groups, plans[1:], strict=True):
        back = lookup.send_back(comm, owner.units(unit, units), plan.reversed())
        for i, rows in sent.unpack(back, units).items():
            unique_rows[i] = rows
    for i, (is_hot, rows) in enumerate(hot):
        if is_hot is not None:
            unique_rows[i] = hot_rows.merge(is_hot, unique_rows[i], rows)
    taken = [0] * len(tables)
    out = []
    for table, ids in calls:
        i = t_of[id(table)]
        out.append(_shape(unique_rows[i], positions[i][taken[i]], ids))
        taken[i] += 1
    return out


def _dedupe(calls):
    """Unique ids of one table's calls, and each call's positions."""
    flats = [tf.reshape(tf.cast(ids, tf.int64), [-1]) for _, ids in calls]
    unique, position = tf.unique(tf.concat(flats, axis=0))
    sizes = tf.stack([tf.size(f) for f in flats])
    return unique, tf.split(position, sizes, num=len(flats))


def _split_hot(tables, uniques) -> tuple:
    """Per table, its cold unique ids (those that go through the
    exchange) and `(is_hot, hot rows)` (`(None, None)` without hot rows)."""
    cold, hot = [], []
    with_hot = [t for t in tables if t.hot is not None]
    values = {}
    if with_hot:  # one all-reduce for all tables' hot rows
        values = dict(
            zip(map(id, with_hot), hot_rows.values_of(with_hot), strict=True)
        )
    for table, unique in zip(tables, uniques, strict=True):
        rest, is_hot, rows = hot_rows.split_unique(
            table, unique, values.get(id(table))
        )
        cold.append(rest)
        hot.append((is_hot, rows))
    return cold, hot


def _shape(unique_rows, position, ids):
    row_shape = unique_rows.shape[1:]
    out = tf.gather(unique_rows, position)
    out = tf.reshape(out, tf.concat([tf.shape(ids), row_shape], axis=0))
    out.set_shape(ids.shape.concatenate(row_shape))
    return out


def _ones(tables) -> tf.Tensor:
    return tf.ones([len(tables)], tf.int32)


def _width(table) -> int:
    return int(np.prod(table.full_shape[1:], dtype=np.int64))


def _dtype_groups(tables) -> list:
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


def _table_flags(flags, i):
    bit = min(i, _MAX_FLAG_BITS)
    return tf.bitwise.bitwise_and(tf.bitwise.right_shift(flags, bit), 1)


class _Sent:
    """The requester's side: its unique ids of all tables, packed by owner
    then table, and how to unpack the rows that come back."""

    def __init__(self, comm, tables, uniques) -> None:
        n, size = len(tables), comm.size
        pairs = list(zip(tables, uniques, strict=True))
        self.sizes = [tf.size(u) for u in uniques]
        table_of = tf.concat(
            [tf.fill([s], i) for i, s in enumerate(self.sizes)], axis=0
        )
        owner = tf.concat(
            [t.shard_of_tensor(u) for t, u in pairs],
            axis=0,
        )
        key = owner * n + table_of
        self.order = tf.argsort(key, stable=True)
        self.table_of = tf.gather(table_of, self.order)  # sorted rows
        counts = tf.math.bincount(
            key, minlength=size * n, maxlength=size * n, dtype=tf.int32
        )
        self.part_counts = tf.reshape(counts, [size, n])
        local = tf.concat(
            [t.local_index_tensor(u) for t, u in pairs],
            axis=0,
        )
        self.local_ids = tf.gather(local, self.order)
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


class _Owner:
    """The owner's side: the ids asked of it, split by table."""

    def __init__(self, comm, tables, asked, recv_parts) -> None:
        n = len(tables)
        comm.stats.record_rows_served(tf.shape(asked)[0])
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
        for table, mine in zip(tables, self.asked, strict=True):
            hot_rows.count_served(table, mine)
        self.tables = tables
        self._rows: dict = {}

    def units(self, unit: int, units: list) -> tf.Tensor:
        """Rows asked of the tables with `units > 0`, as `unit`-element
        rows, in the order asked (by worker, then table)."""
        parts, bases, base = [], [], tf.constant(0, tf.int64)
        for i, table in enumerate(self.tables):
            bases.append(base)
            if units[i] == 0:
                continue
            rows = lookup.read_rows(table, self.asked[i])
            parts.append(tf.reshape(rows, [-1, unit]))
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

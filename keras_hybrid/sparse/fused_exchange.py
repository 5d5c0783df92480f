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

Steps 2 to 4 are `owner_exchange.rows_of`. With several workers per host
and `Communicator.hierarchical` on, `hierarchical_exchange.rows_of` runs them in
host first and across hosts once per host instead.

Each lookup then takes its rows by `(table, call index)`, after a run-time
check that its ids are the prefetched ones.
"""

import contextlib

import tensorflow as tf
from absl import logging

from keras_hybrid._compat import tf as tf_compat
from keras_hybrid.sparse import hierarchical_exchange
from keras_hybrid.sparse import hot_rows
from keras_hybrid.sparse import owner_exchange
from keras_hybrid.sparse import prefetch

_steps: list = []


@contextlib.contextmanager
def step(plan, ids: list, communicator):
    """Within, gathers of the tables of `plan` take their rows from one
    exchange; `ids` are the prefetched calls' ids, in `plan` order."""
    _steps.append(_Step(plan, ids, communicator))
    try:
        yield
    finally:
        _steps.pop()


def note_update(table) -> None:
    """Records that the step updates `table` here: its later lookups must
    read the updated rows, not those the fused exchange pulled before."""
    if _steps:
        _steps[-1].updated.add(id(table))


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
        self.updated: set = set()

    def take(self, table, ids):
        index = self._counts.get(id(table), 0)
        self._counts[id(table)] = index + 1
        key = (id(table), index)
        if key not in self._ids:
            return None
        if id(table) in self.updated:
            prefetch.log_own_exchange(
                "it comes after the step updated the table, and must read "
                "the updated rows",
                table.path,
            )
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
        rows = self._rows[key]
        if _unseen_by_tape(table, rows):
            prefetch.log_own_exchange(
                "it runs under a gradient tape that did not record the "
                "step's fused exchange (an earlier lookup, outside this "
                "tape, ran it, as in a GAN's step), and its gradient must "
                "reach the table",
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
            # The rows take the shape of the ids computed ahead, which a
            # pruned function can leave unknown (ids from a `tf.lookup`
            # table); the step's own ids know it.
            return _shape(rows, table, ids)


def _unseen_by_tape(table, rows) -> bool:
    """Whether a tape records now but not `rows`, rows of a trainable
    table that the fused exchange moved: its gradient would be lost."""
    return (
        table.trainable
        and tf_compat.tape_records()
        and not tf_compat.tape_watches([rows])
    )


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
    if comm.hierarchical:
        unique_rows = hierarchical_exchange.rows_of(comm, tables, uniques)
    else:
        unique_rows = owner_exchange.rows_of(comm, tables, uniques)
    for i, (is_hot, rows) in enumerate(hot):
        if is_hot is not None:
            unique_rows[i] = hot_rows.merge(is_hot, unique_rows[i], rows)
    taken = [0] * len(tables)
    out = []
    for table, ids in calls:
        i = t_of[id(table)]
        rows = tf.gather(unique_rows[i], positions[i][taken[i]])
        out.append(_shape(rows, table, ids))
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


def _shape(rows, table, ids):
    """`rows`, one per id of `ids` in order, shaped `ids.shape + row` with
    every dimension that `ids` knows statically."""
    row_shape = list(table.full_shape[1:])
    out = tf.reshape(rows, tf.concat([tf.shape(ids), row_shape], axis=0))
    out.set_shape(ids.shape.concatenate(row_shape))
    return out

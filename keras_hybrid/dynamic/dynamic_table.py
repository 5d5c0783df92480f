"""`DynamicTable`: keys to rows of a fixed-capacity table, admitted and
evicted as a training step sees them.

One worker's state (no strategy): a `MutableHashTable` maps each admitted
key to its row (its *slot*) in a `[capacity, dim]` Keras variable; a
second one counts, per key not admitted yet, the training steps that saw
it (counts of keys not seen in the current step are forgotten when more
than `capacity` keys wait). Per
row, Keras variables keep the key's use count and last step (for
eviction) and whether the row is live. Everything runs inside the traced
step, before the step's lookup reads the table, so a row given to a new
key holds the key's initial value, and its optimizer slots their initial
values, when the key is first read.
"""

import functools
import itertools
import weakref

import keras
import tensorflow as tf

from keras_hybrid._compat import keras as keras_compat
from keras_hybrid.dynamic import optimizer_slots
from keras_hybrid.dynamic import table_memory
from keras_hybrid.dynamic.eviction import Eviction
from keras_hybrid.dynamic.initial_rows import InitialRows
from keras_hybrid.dynamic.key_owners import KeyOwners
from keras_hybrid.dynamic.owner_map import OwnerMap
from keras_hybrid.plan import routing_plan
from keras_hybrid.strategy import local_variables

# A waiting key's count table value is `count * _STEPS + step % _STEPS`.
_STEPS = 2**32
# Counters of `DynamicTable.stats()`, in order.
COUNTERS = ("admissions", "evictions", "expirations", "rejections")
# Every table made in this process, for callbacks that report on a model's.
_TABLES: "weakref.WeakSet[DynamicTable]" = weakref.WeakSet()
# Creation order of the tables.
_NUMBERS = itertools.count()


def tables_with(communicator) -> list:
    """The tables whose keys are spread over `communicator`'s workers, in
    creation order, the newest of each path."""
    newest = {}
    for table in sorted(_TABLES, key=lambda t: t.number):
        if table.communicator is communicator:
            # A dropped model's table lives on until a collection; a
            # newer layer of the same path is the one in use.
            newest[table.embeddings.path] = table
    return sorted(newest.values(), key=lambda t: t.number)


def plan_entries(communicator) -> tuple:
    """`DynamicTablePlan`s of the tables whose keys are spread over
    `communicator`'s workers, in creation order, the newest of each
    path."""
    where = (
        "on each worker, the rows of the keys whose hash it owns"
        if communicator.size > 1
        else "in this process"
    )
    out = []
    for table in tables_with(communicator):
        capacity, dim = (int(d) for d in table.embeddings.shape)
        admit = (
            "admitted at first sight"
            if table.admit_after <= 1
            else f"admitted after {table.admit_after} steps that see it"
        )
        eviction = {
            None: "no eviction (a full table admits nothing)",
            "ttl": f"rows unused for {table.eviction.ttl} steps expire",
        }.get(table.eviction.kind, f"{table.eviction.kind} eviction")
        out.append(
            routing_plan.DynamicTablePlan(
                path=table.embeddings.path,
                shape=(capacity, dim),
                bytes=capacity * dim * tf.as_dtype(table.embeddings.dtype).size,
                reason=(
                    f"dynamic table: up to {capacity} rows {where}; a key is "
                    f"{admit}; {eviction}"
                ),
            )
        )
    return tuple(out)


def tables_of(variables) -> list:
    """The `DynamicTable`s whose rows are among `variables`, in the order
    of `variables`."""
    tables = list(_TABLES)
    found = []
    for variable in variables:
        found += [t for t in tables if t.embeddings is variable]
    return found


class DynamicTable:
    """The key index, admission counts and row state of one table.

    Args:
        embeddings: `keras.Variable` `[capacity, dim]`. The rows.
        state: Dict of non-trainable `keras.Variable`s made by the layer:
            `"live"` (int8 `[capacity]`), `"uses"` and `"last_step"`
            (int64 `[capacity]`), `"step"` and each of `COUNTERS` (int64
            scalars).
        slot_keys: `tf.Variable` `[capacity]` of the key dtype: each
            row's key.
        initial_rows: `InitialRows`.
        admit_after: Int. Steps that must see a key before it gets a row.
        eviction: `Eviction`.
        communicator: The `Communicator` of the workers whose tables hold
            the keys between them, or None for one process. With one, the
            table has `owners` (`OwnerMap`), balanced over its workers.
    """

    def __init__(
        self,
        embeddings: keras.Variable,
        state: dict,
        slot_keys: tf.Variable,
        initial_rows: InitialRows,
        admit_after: int,
        eviction: Eviction,
        communicator=None,
    ):
        self.embeddings = embeddings
        self.state = state
        self.slot_keys = slot_keys
        self.initial_rows = initial_rows
        self.admit_after = admit_after
        self.eviction = eviction
        self.communicator = communicator
        # One past the last row ever given since the rows were last
        # loaded: every live row is below it (rows are given lowest
        # first), so per-step work covers `[0, end)`, not `capacity`.
        self.end = tf.Variable(
            tf.constant(0, tf.int64), trainable=False, name="rows_end"
        )
        # The optimizer slots the last trace of a training step found.
        self.traced_slots = None
        self.owners = None
        if communicator is not None:
            self.owners = OwnerMap(
                KeyOwners.balanced(communicator.size), embeddings.path
            )
            # Free rows are zeros with initial slots, and rows are given
            # lowest first: the optimizer updates only the rows in use.
            storage = keras_compat.variable_storage(embeddings)
            local_variables.set_rows_in_use(storage, self.rows_in_use)
            # Keras makes the optimizer's slots when `fit` starts: each
            # is checked against the host's memory, and named if short.
            local_variables.set_slot_guard(
                storage,
                functools.partial(
                    table_memory.slot_allocating,
                    embeddings.path,
                    *(int(d) for d in embeddings.shape),
                    embeddings.dtype,
                    communicator.rank,
                ),
            )
        # Called with the table after `renew_index` (the layer tracks the
        # hash tables for `model.export`).
        self.on_renew: list = []
        self.renew_index()
        self.number = next(_NUMBERS)
        _TABLES.add(self)

    def renew_index(self) -> None:
        """Makes the key index and the admission counts new, empty hash
        tables. An eager context reset (an elastic job's recovery from a
        lost worker) loses the old ones; `reload` then rebuilds the
        index from the live rows."""
        key_dtype = self.slot_keys.dtype
        self.index = tf.lookup.experimental.MutableHashTable(
            key_dtype, tf.int64, default_value=-1, name="dynamic_index"
        )
        self.counts = tf.lookup.experimental.MutableHashTable(
            key_dtype, tf.int64, default_value=0, name="dynamic_counts"
        )
        for listener in self.on_renew:
            listener(self)

    @property
    def name(self) -> str:
        """String. The path of the rows' variable."""
        return self.embeddings.path

    @property
    def capacity(self) -> int:
        return int(self.embeddings.shape[0])

    def local_shape_tensor(self) -> tf.Tensor:
        """Shape of this worker's rows (int64), for its pushed gradient
        (`sparse.table_gradients`)."""
        return tf.constant(tuple(self.embeddings.shape), tf.int64)

    def rows_in_use(self) -> tf.Tensor:
        """An int64 bound, at least 1, that every live row is below, and
        so is row 0, which a key without a row reads (with a zero
        gradient) in `key_exchange`."""
        return tf.maximum(self.end.value(), 1)

    def lookup(self, keys: tf.Tensor) -> tf.Tensor:
        """Rows of the 1-D `keys`; -1 for a key with no row."""
        return _lookup(self.index, keys)

    def train_step(self, keys: tf.Tensor, uses: tf.Tensor) -> tf.Tensor:
        """Admits and evicts for one training step that looks up the unique
        1-D `keys` (`uses[i]` times each), then returns their rows (-1:
        not admitted, reads the default row)."""
        step = self.state["step"]
        if self.eviction.kind == "ttl":
            self._expire(step.value)
        rows = _lookup(self.index, keys)
        absent = tf.where(rows < 0)[:, 0]
        waiting = tf.gather(keys, absent)
        # A waiting key's count and the step that saw it last, packed.
        seen = _lookup(self.counts, waiting) // _STEPS + 1
        ready = seen >= self.admit_after
        given = self._admit(tf.boolean_mask(waiting, ready), rows)
        # The first ready keys got rows, in order.
        count = tf.size(given, tf.int64)
        admitted = ready & (tf.cumsum(tf.cast(ready, tf.int64)) <= count)
        still_waiting = tf.boolean_mask(waiting, ~admitted)
        packed = tf.boolean_mask(seen, ~admitted) * _STEPS + step % _STEPS
        self.counts.insert(still_waiting, packed)
        self.counts.remove(tf.boolean_mask(waiting, admitted))
        self._bound_counts(step.value)
        # The rows after admission, without a second lookup: eviction
        # never takes a row read in this step.
        rows = tf.tensor_scatter_nd_update(
            rows, tf.boolean_mask(absent, admitted)[:, None], given
        )
        self._touch(rows, uses, step.value)
        step.assign_add(1)
        return rows

    def _bound_counts(self, step: tf.Tensor) -> None:
        """Forgets the counts of waiting keys not seen in this step when
        more than `capacity` keys wait, so memory stays bounded (by
        `capacity` plus one step's keys) however many keys go by; a key
        seen in consecutive steps keeps its count."""

        def forget():
            keys, packed = self.counts.export()
            stale = tf.reshape(packed, [-1]) % _STEPS != step % _STEPS
            self.counts.remove(tf.boolean_mask(tf.reshape(keys, [-1]), stale))
            return tf.no_op()

        tf.cond(self.counts.size() > self.capacity, forget, tf.no_op)

    def reload(self) -> None:
        """Rebuilds the key index and `end` from the live rows (after a
        restore)."""
        live = tf.where(self.state["live"].value > 0)[:, 0]
        self.index.remove(self.index.export()[0])
        self.index.insert(tf.gather(self.slot_keys, live), live)
        end = int(tf.reduce_max(live)) + 1 if tf.size(live) > 0 else 0
        # Added, not assigned: on TF 2.21 `assign` to a variable made
        # before an eager context reset does nothing (`table_state.load`).
        self.end.assign_add(end - int(self.end.numpy()))

    def stats(self) -> dict:
        """Dict of ints: `rows` (live now) and each of `COUNTERS`, summed
        over the workers that hold the table (a collective on several
        workers: every worker must call it)."""
        per_worker = self.worker_stats()
        return {k: sum(s[k] for s in per_worker) for k in per_worker[0]}

    def worker_stats(self) -> list[dict]:
        """`stats()` of each worker's own table, in rank order (a
        collective on several workers)."""
        names = ("rows", *COUNTERS)
        live = tf.reduce_sum(tf.cast(self.state["live"], "int64"))
        mine = tf.stack([live] + [self.state[n].value for n in COUNTERS])
        comm = self.communicator
        if comm is not None and comm.size > 1:
            mine = comm.gather_fixed(mine[None, :])
        rows = tf.reshape(mine, [-1, len(names)]).numpy().tolist()
        return [dict(zip(names, map(int, r), strict=True)) for r in rows]

    def _admit(self, candidates: tf.Tensor, rows: tf.Tensor) -> tf.Tensor:
        """Gives rows to as many `candidates` as fit, in order; returns the
        rows given (one per admitted candidate, the first ones). Steps that
        admit nobody skip the work."""
        wanted = tf.size(candidates, tf.int64)

        def admit():
            # Every row from `end` on is free: the first `wanted` free
            # rows lie in `[0, span)`.
            span = tf.minimum(self.end.value() + wanted, self.capacity)
            live_rows = tf.math.count_nonzero(self._head("live", span))
            short = wanted - (self.capacity - live_rows)
            if self.eviction.makes_room:
                tf.cond(
                    short > 0, lambda: self._make_room(short, rows), tf.no_op
                )
            free = tf.where(self._head("live", span) == 0)[:, 0]
            count = tf.minimum(wanted, tf.size(free, tf.int64))
            self._fill(candidates[:count], free[:count])
            return free[:count]

        given = tf.cond(wanted > 0, admit, lambda: tf.zeros([0], tf.int64))
        count = tf.size(given, tf.int64)
        self.state["admissions"].assign_add(count)
        self.state["rejections"].assign_add(wanted - count)
        return given

    def _head(self, name: str, span) -> tf.Tensor:
        """Rows `[0, span)` of state variable `name` (a gather: a whole
        read would copy all `capacity` rows after a scatter)."""
        storage = keras_compat.variable_storage(self.state[name])
        return storage.sparse_read(tf.range(span))

    def _make_room(self, short, rows) -> tf.Operation:
        """Evicts up to `short` rows not read in this step (`rows`). The
        table is full, so this reads every row's state."""
        live = self.state["live"].value > 0
        read = tf.boolean_mask(rows, rows >= 0)
        protected = tf.scatter_nd(
            read[:, None], tf.ones_like(read, tf.bool), [self.capacity]
        )
        victims = self.eviction.victims(
            short,
            live,
            protected,
            self.state["uses"].value,
            self.state["last_step"].value,
        )
        self._free(victims, "evictions")
        return tf.no_op()

    def _fill(self, keys: tf.Tensor, rows: tf.Tensor) -> None:
        """Gives `rows` to `keys`: initial rows, slots reset."""
        storage = keras_compat.variable_storage(self.embeddings)
        initial = self.initial_rows(
            keys, int(self.embeddings.shape[1]), storage.dtype
        )
        self.traced_slots = self._write_rows(rows, initial)
        self.index.insert(keys, rows)
        # Grown by addition, as `reload` sets it.
        last = tf.reduce_max(tf.concat([rows, [-1]], 0)) + 1
        self.end.assign_add(tf.maximum(last - self.end.value(), 0))
        self.slot_keys.scatter_nd_update(rows[:, None], keys)
        self._set(rows, "live", 1)
        self._set(rows, "uses", 0)

    def _free(self, rows: tf.Tensor, counter: str) -> None:
        """Takes `rows` from their keys; zeroes them and resets their
        slots, so that no optimizer moves a free row (a regularizer sees
        nothing of an evicted key, and updates may skip free rows)."""
        self.index.remove(tf.gather(self.slot_keys, rows))
        self._set(rows, "live", 0)
        storage = keras_compat.variable_storage(self.embeddings)
        zeros = tf.zeros(
            tf.concat([tf.shape(rows), storage.shape[1:]], 0), storage.dtype
        )
        self._write_rows(rows, zeros)
        self.state[counter].assign_add(tf.size(rows, tf.int64))

    def _write_rows(self, rows: tf.Tensor, values: tf.Tensor) -> list:
        """Writes `values` into `rows` of the table and resets those rows
        of its optimizer slots (a slot that starts at the weights, to
        `values`); returns the slots."""
        storage = keras_compat.variable_storage(self.embeddings)
        storage.scatter_nd_update(rows[:, None], values)
        optimizer_slots.share_reads(storage)
        # Found anew each time this runs in Python (at each trace, or each
        # eager call that writes rows): `compile` may have put in another
        # optimizer. `fit` builds it before tracing the step.
        slots = optimizer_slots.find(self.embeddings)
        optimizer_slots.reset_rows(slots, rows, values)
        return slots

    def _expire(self, step: tf.Tensor) -> None:
        end = self.end.value()
        live = self._head("live", end) > 0
        old = self.eviction.expired(self._head("last_step", end), step)
        self._free(tf.where(live & old)[:, 0], "expirations")

    def _touch(self, rows: tf.Tensor, uses: tf.Tensor, step) -> None:
        found = rows >= 0
        rows, uses = tf.boolean_mask(rows, found), tf.boolean_mask(uses, found)
        variable = keras_compat.variable_storage(self.state["uses"])
        variable.scatter_nd_add(rows[:, None], tf.cast(uses, tf.int64))
        self._set(rows, "last_step", step)

    def _set(self, rows: tf.Tensor, name: str, value) -> None:
        storage = keras_compat.variable_storage(self.state[name])
        values = tf.fill(tf.shape(rows), tf.cast(value, storage.dtype))
        storage.scatter_nd_update(rows[:, None], values)


def _lookup(table, keys: tf.Tensor) -> tf.Tensor:
    # A hash table's lookup loses the keys' static shape; restore it.
    return tf.reshape(table.lookup(keys), tf.shape(keys))

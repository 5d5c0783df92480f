"""`ShardedTable`: the rows of a partitioned table that this worker owns.

A sparse variable lives as one `ShardedTable` per worker, holding the rows
its `RowPartition` gives this shard. What a whole read returns depends on
who reads:

- a gather (`tf.gather`, `ops.take`, `tf.nn.embedding_lookup`) calls
  `sparse_read`, which pulls the rows of any ids from their owners;
- the optimizer, inside `extended.update` (see `shard_view`), sees the
  local rows: it updates only what this shard owns;
- an eager whole read between steps (`ops.sum(layer.embeddings)`, and
  `numpy()`, so `get_weights()`) gathers the whole table from all workers:
  a collective, fenced like `numpy()`;
- anything else (a read inside a traced step or under a gradient tape)
  gets an empty `[0, ...]` stand-in, which `ops.take` uses only for its
  shape. `check_whole_reads` turns any other use, found at trace time,
  into a clear error instead of a wrong result; a whole read traced in a
  `tf.function` that is not a strategy step raises at once.

While a table is *provisional* (placed before any step was traced, see
`strategy.variable_router`), reads also serve placement: in a discovery
trace (`plan.use_discovery`) gathers and whole reads are recorded and
answered without communication; in Keras' symbolic scope (output specs,
never run) likewise; an eager whole read that is not a shape query asks
the router to make the table dense there and then.

Whole reads arrive at `to_tensor` (`_compat.tf.ConvertibleVariable`).
Eager reads get the shard's current row count from `read_shape`; inside a
traced step the row count is unknown, and the lookup reads the partition
from variables (`PartitionLookup`), so a resize (`sparse.resharding`)
does not make a traced step stale.
"""

import weakref

import numpy as np
import tensorflow as tf

from keras_hybrid._compat import keras as keras_compat
from keras_hybrid._compat import tf as tf_compat
from keras_hybrid.comm import call_fence
from keras_hybrid.plan import use_discovery
from keras_hybrid.sparse import fused_exchange
from keras_hybrid.sparse import lookup
from keras_hybrid.sparse import prefetch
from keras_hybrid.sparse.partition_lookup import PartitionLookup
from keras_hybrid.sparse.shard_view import in_shard_view
from keras_hybrid.sparse.shard_view import shard_view
from keras_hybrid.utils.thread_flag import ThreadFlag

ROLES = ("table", "slot")
BLOCK_BYTES = 16 * 2**20  # rows gathered per collective when saving
_SHAPE_OPS = ("Shape", "ShapeN")
# graph -> [(stand-in tensor's name, table path)] of whole reads made while
# tracing. Names, not the tensor and table: a value that referred to its
# graph (as a tensor does) would keep its weak key, and with it the graph
# and the table, alive for the life of the process.
_whole_reads: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

# Whether this thread runs a strategy step (`step_trace`).
_in_step = ThreadFlag()

__all__ = ["ShardedTable", "check_whole_reads", "shard_view", "step_trace"]


def in_step() -> bool:
    """Whether this thread runs a strategy step (`step_trace`)."""
    return bool(_in_step)


def step_trace():
    """Marks a strategy step on this thread (a context manager): whole
    reads traced inside it are checked by `check_whole_reads`; outside one,
    a traced whole read raises at once (nothing else would check it)."""
    return _in_step.scope()


class ShardedTable(tf_compat.ConvertibleVariable):
    """One shard of a row-partitioned variable (see the module docstring).

    Args:
        path: String. The Keras path of the full variable.
        full_shape: Tuple of ints. Shape of the whole table.
        partition: `RowPartition` of the table.
        communicator: The job's `Communicator`; its rank is the shard.
        role: String, one of `ROLES`: `"table"` (a model variable, read by
            gathers) or `"slot"` (optimizer state that follows a table).
        **kwargs: Passed to `tf.Variable`; `initial_value` gives the local
            rows.
    """

    def __init__(
        self, *, path, full_shape, partition, communicator, role, **kwargs
    ) -> None:
        super().__init__(**kwargs)
        self.path = path
        self.full_shape = tuple(full_shape)
        # What a traced lookup reads: gathers only read tables, not slots.
        self._lookup = None
        if role == "table":
            self._lookup = PartitionLookup(partition, path)
        self.partition = partition
        self.communicator = communicator
        self.role = role
        # Set by the router while placement is not final: called with this
        # table on an eager whole read; returns the dense replacement.
        self.on_whole_read = None
        # `HotRows` of this table, or None (`HybridStrategy(hot_rows=K)`).
        self.hot = None
        # A row-wise constraint the strategy applies after each update.
        self.row_constraint = None
        # Weak references to the optimizer slots partitioned like this
        # table, which move with it (`sparse.resharding`).
        self._slot_refs: list = []

    def add_slot(self, slot: "ShardedTable") -> None:
        """Records optimizer state `slot`, partitioned like this table."""
        self._slot_refs.append(weakref.ref(slot))

    def live_slots(self) -> list:
        """The optimizer slots of this table that still exist."""
        return [s for s in (r() for r in self._slot_refs) if s is not None]

    @property
    def partition(self):
        """`RowPartition` of the table; setting it (a resize) also sets
        the variables that traced lookups read."""
        return getattr(self, "_partition", None)

    @partition.setter
    def partition(self, partition) -> None:
        if getattr(self, "_lookup", None) is not None:
            self._lookup.update(partition)
        self._partition = partition

    def shard_of_tensor(self, ids: tf.Tensor) -> tf.Tensor:
        """Shard owning each id (int32), read from the current partition
        at run time, so traced steps survive a resize."""
        return self._lookup.shard_of(ids)

    def local_index_tensor(self, ids: tf.Tensor) -> tf.Tensor:
        """Row of each id in its owner's storage (int64), read from the
        current partition at run time."""
        return self._lookup.local_index(ids)

    def local_shape_tensor(self) -> tf.Tensor:
        """This shard's shape as an int64 tensor, read at run time."""
        rows = tf.raw_ops.VariableShape(input=self.handle, out_type=tf.int64)
        return tf.concat(
            [rows[:1], tf.constant(self.full_shape[1:], tf.int64)], axis=0
        )

    @property
    def shard(self) -> int:
        return self.communicator.rank

    @property
    def local_rows(self) -> int:
        """Rows this shard stores, as its partition says."""
        return self.partition.rows_on_shard(self.shard)

    @property
    def local_shape(self) -> tuple:
        return (self.local_rows, *self.full_shape[1:])

    # The resource variable is created with an unknown first dimension, so
    # that a resize (`sparse.resharding`) can give the same variable another
    # number of rows. Eagerly its shape and reads say the current rows;
    # inside a traced step the rows stay unknown, so the step is right for
    # any later row count (a resize does not trace it again).

    @property
    def shape(self) -> tf.TensorShape:
        if self.partition is None:  # during __init__
            return super().shape
        if not tf.executing_eagerly():
            return tf.TensorShape([None, *self.full_shape[1:]])
        return tf.TensorShape(self.local_shape)

    def read_shape(self):
        if self.partition is None:  # during __init__
            return None
        if not tf.executing_eagerly():
            return (None, *self.full_shape[1:])
        return self.local_shape

    # -- reads

    def sparse_read(self, indices, name=None):
        """Rows of global `indices`, pulled from the shards that own them."""
        del name
        if self.role != "table":
            raise TypeError(
                f"Optimizer state {self.path!r} is partitioned with its "
                "table and cannot be gathered by id."
            )
        if use_discovery.active():
            use_discovery.recorder().gathered(self.path, indices)
            return self._local_stand_in(indices)
        if keras_compat.in_symbolic_scope():
            return self._local_stand_in(indices)
        if prefetch.active():
            stand_in = self._local_stand_in(indices)
            prefetch.record(self, tf.convert_to_tensor(indices), stand_in)
            return stand_in
        if tf_compat.in_while_loop() and tf_compat.tape_records():
            raise ValueError(
                f"Partitioned table {self.path!r} is gathered inside a "
                "`tf.while_loop` (a Keras RNN cell, say) under a gradient "
                "tape: the gradient of its exchange cannot leave TF's loop "
                "gradient. Gather the rows before the loop, or keep the "
                "table dense: `HybridStrategy(variable_kinds="
                f"{{{self.path!r}: 'dense'}})`."
            )
        try:
            rows = fused_exchange.take(self, indices)
            if rows is None:
                rows = lookup.pull(self, indices)
        except Exception as error:
            _name_the_exchange(error, self)
            raise
        return rows

    def _local_stand_in(self, indices):
        """Local rows shaped like a lookup of `indices`, for graphs that
        are never run (no communication)."""
        rows = max(1, self.local_rows)
        ids = tf.math.floormod(tf.cast(indices, tf.int64), rows)
        return super().sparse_read(ids)

    def read_local_rows(self, local_indices):
        """Gathers rows of this shard by local index (owner side)."""
        return super().sparse_read(local_indices)

    def to_tensor(self, dtype=None, name=None, as_ref=False):
        if self.role == "slot" or in_shard_view() or as_ref:
            return self.stored_tensor(dtype=dtype, name=name, as_ref=as_ref)
        if use_discovery.active() or keras_compat.in_symbolic_scope():
            full = tf.zeros(self.full_shape, dtype or self.dtype)
            if use_discovery.active():
                use_discovery.recorder().read_whole(self.path, full)
            return full
        if (
            self.on_whole_read is not None
            and tf.executing_eagerly()
            and not tf_compat.in_shape_query()
        ):
            return tf.convert_to_tensor(self.on_whole_read(self), dtype)
        if (
            tf.executing_eagerly()
            and not tf_compat.in_shape_query()
            and not tf_compat.tape_records()
        ):
            # User code between steps (`ops.sum(layer.embeddings)`, a
            # nearest-neighbour search after `fit`): the whole value, as
            # `numpy()` gives it, not the stand-in below.
            return tf.convert_to_tensor(self.numpy(), dtype)
        # Zero rows, and an unknown row count for shape inference: a use
        # that would check rows against something else is still traced, so
        # `check_whole_reads` can name the table instead of a shape error.
        # A read of the table, so that gradients reach it and Keras does
        # not stop first with "No gradients provided". An empty gather,
        # not a slice of a whole read: TF copies a variable that has been
        # gathered from on every whole read (copy-on-read), and `ops.take`
        # asks for this shape in every step (and in its prefetched ids).
        if not tf.executing_eagerly() and not _in_step:
            if not tf_compat.in_shape_query():
                raise ValueError(
                    f"Partitioned table {self.path!r} was read whole "
                    "inside a `tf.function` that is not a step of the "
                    "strategy (`fit`, `evaluate`, `predict` or "
                    "`strategy.run`). Read it eagerly, outside the "
                    "function (`ops.convert_to_tensor(variable)` or "
                    "`variable.numpy()`, a collective every worker makes), "
                    "and pass the value in; or keep the variable dense: "
                    f"`HybridStrategy(variable_kinds={{{self.path!r}: "
                    "'dense'})`."
                )
        del name  # a gather takes no name
        empty = super().sparse_read(tf.zeros([0], tf.int64))
        stand_in = tf.compat.v1.placeholder_with_default(
            tf.cast(empty, dtype or self.dtype), [None, *self.full_shape[1:]]
        )
        if not tf.executing_eagerly():
            graph = tf.compat.v1.get_default_graph()
            _whole_reads.setdefault(graph, []).append(
                (stand_in.name, self.path)
            )
        return stand_in

    @call_fence.fences("variable.numpy")
    def numpy(self):
        """The whole table, gathered from every worker (a collective)."""
        return self.gather_full()

    @call_fence.fences("variable.numpy")
    def __array__(self, dtype=None, copy=None):
        del copy
        value = self.gather_full()
        return value if dtype is None else value.astype(dtype)

    @call_fence.fences("variable.numpy")
    def gather_full(self) -> np.ndarray:
        """Gathers the full table on every worker, one block at a time.

        Every worker must call it at the same time (a collective). Each
        ends up holding the whole table once, plus one block in flight
        (`id_blocks`): rows are copied into place as they arrive.
        """
        full = np.empty(self.full_shape, dtype=self.dtype.as_numpy_dtype)
        for start, rows in self.id_blocks():
            full[start : start + len(rows)] = rows
        return full

    # -- TensorFlow checkpoints (`tf.train.Checkpoint`)

    @property
    def checkpoint_value(self):
        """A TensorFlow checkpoint holds the whole table, as one process's
        does: every worker gathers it when the checkpoint is written (a
        collective; TF's multi-worker tutorials save on every worker, the
        chief into the real folder), and any worker count restores it."""
        return self._whole_for_checkpoint

    def _whole_for_checkpoint(self):
        if not tf.executing_eagerly():
            raise RuntimeError(
                f"A TensorFlow checkpoint of partitioned table {self.path!r}"
                " gathers the whole table, which can only be done eagerly: "
                "call `checkpoint.save`/`write` outside a `tf.function`, on "
                "every worker. `tf.saved_model.save` cannot hold a "
                "partitioned table; use `model.export` (docs/checkpoints.md)."
            )
        return tf.constant(self.gather_full())

    def restore_value(self, value):
        """This worker's rows of the whole table a checkpoint holds."""
        return self.assign(value, read_value=False)

    def id_blocks(self, block_bytes: int | None = None):
        """Yields `(first_id, rows)` for consecutive blocks of global ids.

        A collective: every worker must iterate it to the end at the same
        time. Each block is about `block_bytes` and arrives whole on every
        worker, so a file writer can stream a table of any size.
        """
        if not tf.executing_eagerly():
            raise RuntimeError(
                f"The full value of partitioned table {self.path!r} can "
                "only be gathered eagerly, e.g. with `get_weights()`."
            )
        block_rows = self._block_rows(block_bytes)
        num_rows = self.full_shape[0]
        for start in range(0, num_rows, block_rows):
            ids = np.arange(start, min(start + block_rows, num_rows))
            owner = self.partition.shard_of(ids)
            mine = self.partition.local_index(ids[owner == self.shard])
            rows = self.read_local_rows(tf.constant(mine, tf.int64))
            gathered, _ = self.communicator.all_gather(rows, path="control")
            gathered = gathered.numpy()
            # Each worker sent its rows in id order; `argsort` of the owners
            # (stable) lists the block's ids in that same, rank-major order.
            block = np.empty_like(gathered)
            block[np.argsort(owner, kind="stable")] = gathered
            yield start, block

    def local_blocks(self, block_bytes: int | None = None):
        """Yields this shard's rows (local order) as NumPy blocks of about
        `block_bytes`, so a writer never copies the whole shard."""
        rows = self.local_rows
        step = self._block_rows(block_bytes)
        for start in range(0, rows, step):
            local = tf.range(start, min(start + step, rows), dtype=tf.int64)
            yield self.read_local_rows(local).numpy()

    def _block_rows(self, block_bytes: int | None) -> int:
        row_bytes = int(np.prod(self.full_shape[1:])) * self.dtype.size
        return max(1, (block_bytes or BLOCK_BYTES) // max(1, row_bytes))

    def assign_local_rows(self, rows) -> None:
        """Replaces this shard's rows (local order) without communication."""
        super().assign(rows)

    def take_rows(self, partition, rows) -> None:
        """Makes `rows` (local order of `partition`) this shard's storage
        and `partition` its layout; the row count may change (a resize).

        Raises:
            ValueError: If `rows` are not the rows `partition` gives this
                shard.
        """
        rows = tf.convert_to_tensor(rows, dtype=self.dtype)
        expected = (partition.rows_on_shard(self.shard), *self.full_shape[1:])
        if tuple(rows.shape) != expected:
            raise ValueError(
                f"Shard {self.shard} of table {self.path!r} needs rows of "
                f"shape {expected} under the new partition. Received: "
                f"{tuple(rows.shape)}"
            )
        # No read back: the old partition would give it the old shape.
        super().assign(rows, read_value=False)
        self.partition = partition

    # -- writes

    def assign(self, value, use_locking=None, name=None, read_value=True):
        """Inside `shard_view` assigns this shard's rows; otherwise takes
        the rows this shard owns from a full-table `value` (`set_weights`).
        """
        if not in_shard_view():
            value = tf.convert_to_tensor(value, dtype=self.dtype)
            if value.shape[0] != self.full_shape[0]:
                raise ValueError(
                    f"Assigning to partitioned table {self.path!r} needs "
                    f"the full table of shape {self.full_shape}. Received: "
                    f"value.shape={tuple(value.shape)}"
                )
            ids = self.partition.ids_on_shard(self.shard)
            value = tf.gather(value, ids)
        return super().assign(value, use_locking, name, read_value)


def check_whole_reads(graph) -> None:
    """Raises if a table traced in `graph` was read as a whole tensor.

    Raises:
        ValueError: Naming the table and the op that used the whole value.
    """
    reads = _whole_reads.pop(graph, [])
    for name, path in reads:
        stand_in = graph.get_tensor_by_name(name)
        # `ops.take` asks for the row count (to wrap negative ids); with
        # zero rows, negative ids stay negative and are reported.
        users = [op for op in stand_in.consumers() if op.type not in _SHAPE_OPS]
        if users:
            hint = ""
            if users[0].type == "GatherV2":
                hint = (
                    " Something turned the `keras.Variable` into a tensor "
                    "before gathering from it: `ops.convert_to_tensor`, "
                    "`tf.nn.embedding_lookup` of a list of tables, or, "
                    "in one process, of the variable itself (pass its "
                    "`.value`, the `tf.Variable`). Gather from the "
                    "variable (`ops.take`, `tf.gather`)."
                )
            raise ValueError(
                f"Partitioned table {path!r} was read as a whole "
                f"tensor by op {users[0].name!r} ({users[0].type}). A "
                "table split over workers can only be read by id "
                "(`ops.take`, `tf.gather`, `tf.nn.embedding_lookup`)."
                f"{hint} If the layer needs the whole value, keep the "
                "variable dense: `HybridStrategy(variable_kinds="
                f"{{{path!r}: 'dense'}})`."
            )


def _name_the_exchange(error: Exception, table: "ShardedTable") -> None:
    """Says in `error`'s message that it rose in the strategy's exchange of
    `table`: Keras re-raises an error of a layer call with the layer's name
    and a new message made from the first argument, so the words go there
    (a note otherwise)."""
    comm = table.communicator
    where = (
        f"\n(keras-hybrid: raised in HybridStrategy's exchange of the rows "
        f"of partitioned table {table.path!r}, {table.full_shape[0]} rows "
        f"over {comm.size} workers, on worker {comm.rank}.)"
    )
    if error.args and isinstance(error.args[0], str):
        if "keras-hybrid: raised in HybridStrategy" not in error.args[0]:
            error.args = (error.args[0] + where, *error.args[1:])
    else:
        error.add_note(where.strip())

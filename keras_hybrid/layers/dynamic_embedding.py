"""`DynamicEmbedding`: an embedding over keys from an unbounded space."""

import contextlib

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from keras_hybrid._compat import keras as keras_compat
from keras_hybrid._compat import tf as tf_compat
from keras_hybrid.dynamic import key_exchange
from keras_hybrid.dynamic import key_hash
from keras_hybrid.dynamic import optimizer_slots
from keras_hybrid.dynamic import table_memory
from keras_hybrid.dynamic.dynamic_table import COUNTERS
from keras_hybrid.dynamic.dynamic_table import DynamicTable
from keras_hybrid.dynamic.eviction import Eviction
from keras_hybrid.dynamic.initial_rows import InitialRows
from keras_hybrid.layers import dynamic_keys
from keras_hybrid.layers import key_watch
from keras_hybrid.layers import saved_keys
from keras_hybrid.layers import stock_lookup
from keras_hybrid.plan import use_discovery
from keras_hybrid.sparse import prefetch
from keras_hybrid.sparse import shard_regularizers
from keras_hybrid.strategy import local_variables
from keras_hybrid.strategy.hybrid_extended import is_hybrid

# Key dtypes the layer takes: any integer dtype is read as int64.
KEY_DTYPES = ("int64", "string")


@keras.saving.register_keras_serializable(package="keras_hybrid")
class DynamicEmbedding(keras.layers.Layer):
    """Turns keys (strings or integers of any range) into dense vectors.

    A key gets a row of a `[capacity, output_dim]` table once training
    steps have seen it `admit_after` times; before that it reads the
    default row and its gradient is dropped. A new row starts from a value
    drawn from the key and `seed` alone. When the table is full, `eviction`
    decides which rows give way; an evicted key starts again from its
    initial value when admitted again. The rows are an ordinary Keras
    variable, so stock optimizers train them.

    Only training calls (`training=True`, as in `fit`) admit, count and
    evict; `predict` and `evaluate` read the table and give unknown keys
    the default row. A call with no `training` (in a model whose `call`
    takes none, `fit` passes none) is a training call when a gradient
    tape records it. Call the layer once per training step.

    Under `keras_hybrid.HybridStrategy`, each key has an owner (a hash of
    the key picks a virtual shard, a virtual shard a worker), and each
    worker holds a table of `capacity` rows for the keys it owns, with
    their optimizer slots, admission counts and eviction state. A
    worker sends its batch's unique keys to their owners and gets their
    rows back; gradients go back to the owners, summed per key. In an
    elastic job, resizes and lost workers move whole virtual shards with
    their keys (`dynamic.key_moves`, `elastic.dynamic_shard`). Keys travel
    as int64, so there a string key stands for its 63-bit hash
    (`dynamic.key_hash.string_keys`, what `keras.layers.Hashing` computes);
    its initial row and owner are the same as in one process, and two
    strings share a row only if their hashes collide.

    Args:
        output_dim: Int. Width of each row.
        capacity: Int. Most rows the table holds (on each worker,
            under `HybridStrategy`).
        admit_after: Int. Training steps that must see a key (once per
            step however often it appears) before it gets a row. Defaults
            to `1`.
        eviction: String or None. `"lfu"` evicts the rows looked up least
            often, `"lru"` the longest unused, `"ttl:<steps>"` expires rows
            unused for more than `<steps>` steps; with None (or when
            every row is read in the current step) keys that find no room
            are not admitted in that step, read the default row and are
            counted in `stats()["rejections"]`. Defaults to `None`.
        embeddings_initializer: Initializer of new rows; see
            `keras_hybrid.dynamic.initial_rows.SUPPORTED_INITIALIZERS`.
            Defaults to `"uniform"`.
        embeddings_regularizer: Regularizer of the table, as in
            `keras.layers.Embedding`: it penalizes the live rows (a key
            with no row has none). On several workers it must be a sum
            over rows (L1, L2, L1L2); the penalty is then the sum over
            every worker's rows. Defaults to `None`.
        embeddings_constraint: Constraint of the table. Defaults to `None`.
        mask_zero: Bool. Mask key `0` (integers) or `""` (strings).
            Defaults to `False`.
        default_value: Float or list of `output_dim` floats. The row of a
            key with no row. Defaults to zeros.
        seed: Int. Seed of the initial rows. Defaults to `0`.
        key_dtype: `"int64"`, `"string"` or None to take the dtype of the
            first input. Defaults to `None`.
        **kwargs: Base `keras.layers.Layer` arguments (`name`, `dtype`,
            `trainable`).

    ```python
    ids = keras.Input(shape=(None,), dtype="string")
    x = keras_hybrid.layers.DynamicEmbedding(
        output_dim=32, capacity=100_000, admit_after=2, eviction="lfu"
    )(ids)
    ```

    Raises:
        TypeError: For float, ragged or sparse keys, or a non-int
            `output_dim`, `capacity` or `admit_after`.
        ValueError: For a bad `capacity`, `admit_after` or `eviction`.
        NotImplementedError: For an initializer that depends on the
            table's shape; when built under a `tf.distribute` strategy
            other than `HybridStrategy`; for a regularizer that is not a
            sum over rows, or a constraint that mixes rows, on several
            workers (in an elastic job, when `--max-np` is more than one).
    """

    def __init__(
        self,
        output_dim: int,
        capacity: int,
        admit_after: int = 1,
        eviction: str | None = None,
        embeddings_initializer="uniform",
        embeddings_regularizer=None,
        embeddings_constraint=None,
        mask_zero: bool = False,
        default_value=None,
        seed: int = 0,
        key_dtype: str | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        for name, value in (
            ("output_dim", output_dim),
            ("capacity", capacity),
            ("admit_after", admit_after),
        ):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(
                    f"`{name}` must be an int. Received: {name}={value!r}."
                )
            if value < 1:
                raise ValueError(
                    f"`{name}` must be an int >= 1. Received: {name}={value!r}."
                )
        self.output_dim = output_dim
        self.capacity = capacity
        self.admit_after = admit_after
        self.eviction = Eviction.parse(eviction)
        self.initial_rows = InitialRows(embeddings_initializer, seed)
        self.embeddings_initializer = self.initial_rows.initializer
        self.embeddings_regularizer = keras.regularizers.get(
            embeddings_regularizer
        )
        self.embeddings_constraint = keras.constraints.get(
            embeddings_constraint
        )
        self.mask_zero = mask_zero
        self.supports_masking = mask_zero
        # Hash tables and unique keys have no XLA kernels: `compile`'s
        # `jit_compile="auto"` (True in one process with a GPU) resolves
        # to False, and `jit_compile=True` warns and runs without XLA.
        self.supports_jit = False
        self.default_value = dynamic_keys.default_row(default_value, output_dim)
        self.seed = seed
        self.key_dtype = (
            dynamic_keys.key_dtype(key_dtype) if key_dtype else None
        )
        self.table = None
        self._communicator = None
        self._key_rank = None
        self.key_owners = None
        self._told_training = False

    def __call__(self, inputs, *args, **kwargs):
        dynamic_keys.check_keys(inputs)
        if self.key_dtype is None:
            self.key_dtype = dynamic_keys.key_dtype(inputs.dtype)
        return super().__call__(inputs, *args, **kwargs)

    def build(self, input_shape=None) -> None:
        if self.key_dtype is None:
            raise ValueError(
                "Cannot build a DynamicEmbedding before it knows its key "
                "dtype. Call it on keys first, or pass "
                "key_dtype='int64' or key_dtype='string'."
            )
        self._communicator = _communicator_of_strategy()
        self._key_rank = None if input_shape is None else len(input_shape)
        self._check_whole_table_terms()
        scope = contextlib.nullcontext()
        if self._communicator is not None:
            # Each worker's shard holds its own keys' rows: neither
            # partitioned nor broadcast by the strategy.
            scope = local_variables.scope()
        rank = None if self._communicator is None else self._communicator.rank
        with (
            # Made now and out of any graph being traced: a subclassed
            # model builds its layers in `call`, which Keras traces
            # symbolically in a stateless scope, where it would make
            # Keras variables at the scope's end, outside the local scope.
            # The hash tables and keys as well.
            tf.init_scope(),
            keras_compat.variables_made_now(),
            scope,
            table_memory.allocating(
                self.name,
                self.capacity,
                self.output_dim,
                self.variable_dtype,
                self.table_key_dtype,
                rank,
            ),
        ):
            self._build_table()
        # Read by the traced step: a resize moves whole virtual shards.
        self.key_owners = self.table.owners

    @property
    def table_key_dtype(self) -> str:
        """The dtype of the table's keys: `key_dtype` in one process; int64
        under `HybridStrategy`, where a string stands for its hash."""
        return "int64" if self._communicator is not None else self.key_dtype

    def _hashes_strings(self) -> bool:
        return self.key_dtype == "string" and self.table_key_dtype == "int64"

    def _check_whole_table_terms(self) -> None:
        """On several workers, refuses a regularizer that is not a sum over
        rows, and a constraint that mixes rows: either would cover one
        worker's rows as if they were the table. A penalty summed over rows
        (L1, L2) and a constraint that maps each row by itself (`NonNeg`,
        `UnitNorm(axis=1)`, `MaxNorm(axis=1)`) give each worker's rows what
        one process gives them."""
        comm = self._communicator
        if comm is None or comm.width < 2:
            return
        constraint = self.embeddings_constraint
        if constraint is not None and not shard_regularizers.acts_per_row(
            constraint, (self.output_dim,)
        ):
            raise NotImplementedError(
                "`embeddings_constraint` is not supported for a "
                "DynamicEmbedding on several workers when it mixes rows: "
                "each worker holds only its keys' rows. Received: "
                f"embeddings_constraint={type(constraint).__name__} "
                f"(config {constraint.get_config()}) on {comm.width} "
                "workers. A constraint on each row by itself works, such "
                "as `keras.constraints.MaxNorm(axis=1)` or "
                "`UnitNorm(axis=1)`."
            )
        regularizer = self.embeddings_regularizer
        if regularizer is not None and not shard_regularizers.sums_over_rows(
            regularizer, (self.output_dim,)
        ):
            raise NotImplementedError(
                "`embeddings_regularizer` is not supported for a "
                "DynamicEmbedding on several workers when its penalty is "
                "not a sum over rows: each worker holds only its keys' "
                "rows. Received: embeddings_regularizer="
                f"{type(regularizer).__name__} on {comm.width} workers. "
                "A penalty summed over rows works, such as "
                "`keras.regularizers.L2` or `L1L2`."
            )

    def _build_table(self) -> None:
        self.embeddings = self.add_weight(
            shape=(self.capacity, self.output_dim),
            initializer="zeros",
            name="embeddings",
            regularizer=self.embeddings_regularizer,
            constraint=self.embeddings_constraint,
        )
        self.table = DynamicTable(
            self.embeddings,
            self._state_variables(),
            tf.Variable(
                tf.zeros([self.capacity], self.table_key_dtype),
                trainable=False,
                name="slot_keys",
            ),
            self.initial_rows,
            self.admit_after,
            self.eviction,
            self._communicator,
        )
        if (
            self.embeddings_regularizer is not None
            and self._communicator is not None
        ):
            # The penalty summed over every worker's rows.
            self.embeddings.regularizer = (
                shard_regularizers.LocalRowsRegularizer(
                    self.embeddings_regularizer, self.table, self._communicator
                )
            )
        self._track_table(self.table)
        self.table.on_renew.append(self._track_table)

    def _track_table(self, table: DynamicTable) -> None:
        # Attributes of the layer, so that TensorFlow tracks the hash
        # tables and keys for `model.export` (a SavedModel).
        self.key_index = table.index
        self.admission_counts = table.counts
        self.slot_keys = table.slot_keys

    def _state_variables(self) -> dict:
        def make(name, shape, dtype="int64"):
            return self.add_weight(
                shape=shape,
                initializer="zeros",
                dtype=dtype,
                trainable=False,
                autocast=False,
                name=name,
            )

        state = {
            "live": make("live", (self.capacity,), "int8"),
            "uses": make("uses", (self.capacity,)),
            "last_step": make("last_step", (self.capacity,)),
            "step": make("step", ()),
        }
        state.update({name: make(name, ()) for name in COUNTERS})
        return state

    def call(self, inputs, training=None):
        training = self._training(training)
        keys = tf.reshape(dynamic_keys.as_keys(inputs, self.key_dtype), [-1])
        if self._hashes_strings():
            keys = key_hash.string_keys(keys)
        key_watch.saw(self, keys)
        unique, position, uses = tf.unique_with_counts(keys, tf.int64)
        if self._communicator is not None:
            values = tf.gather(
                self._owners_rows(unique, uses, training), position
            )
        else:
            values = self._local_rows(unique, position, uses, training)
        shape = tf.concat([tf.shape(inputs), [self.output_dim]], 0)
        values = tf.reshape(values, shape)
        # The hash tables' lookups lose the static shape; restore it.
        values.set_shape(tf.TensorShape(inputs.shape) + [self.output_dim])
        return values

    def _training(self, training) -> bool:
        """`training`, or when the caller passed none, whether a gradient
        tape records this call. Keras' `fit` passes no `training` to a
        model whose `call` takes none (a subclassed model often), and its
        layers then get None; the tape says that the rows get gradients,
        so the call is a training step."""
        if training is not None:
            return bool(training)
        recording = tf_compat.tape_records()
        if recording and not self._told_training:
            self._told_training = True
            logging.info(
                "keras-hybrid: %s is called with no `training` argument "
                "under a gradient tape: it admits, counts and evicts keys "
                "as in training. Pass `training` through the model's "
                "`call` to decide.",
                self.name,
            )
        return recording

    def _local_rows(self, unique, position, uses, training):
        """One process: the rows of each lookup, from this table."""
        if training:
            rows = self.table.train_step(unique, uses)
        else:
            rows = self.table.lookup(unique)
        rows = tf.gather(rows, position)
        found = (rows >= 0)[:, None]
        values = keras.ops.take(self.embeddings, tf.maximum(rows, 0), axis=0)
        default = tf.cast(self.default_value, values.dtype)
        return tf.where(found, values, default[None, :])

    def _owners_rows(self, unique, uses, training):
        """Under `HybridStrategy`: the rows of the unique keys, from the
        workers that own them (`dynamic.key_exchange`)."""
        if (
            keras_compat.in_symbolic_scope()
            or use_discovery.active()
            or prefetch.active()
        ):
            # A graph that is never run (Keras' output specs, the
            # strategy's placement and prefetch traces): no collectives.
            dtype = keras.backend.standardize_dtype(self.compute_dtype)
            return tf.zeros([tf.size(unique), self.output_dim], dtype)
        if training:
            optimizer_slots.check_optimizers(
                self.embeddings, self._communicator.size
            )
        return key_exchange.rows_of(
            self._communicator,
            self.table,
            self.key_owners,
            unique,
            uses,
            bool(training),
            self.default_value,
        )

    def compute_mask(self, inputs, mask=None):
        if not self.mask_zero:
            return None
        zero = "" if self.key_dtype == "string" else 0
        return keras.ops.not_equal(inputs, zero)

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.output_dim)

    def stats(self) -> dict:
        """Dict of ints: live `rows` now, and since the layer was made,
        `admissions` (rows given to keys), `evictions`, `expirations`
        (TTL) and `rejections` (keys ready for a row that found none).

        Under `HybridStrategy` the figures are summed over the workers,
        and every worker must call it at the same time (a collective).
        """
        return self.table.stats()

    def worker_stats(self) -> list[dict]:
        """`stats()` of each worker's own table, in rank order (one dict
        in one process; a collective on several workers)."""
        return self.table.worker_stats()

    def live_keys(self) -> tuple[np.ndarray, np.ndarray]:
        """`(keys, rows)`: every key that has a row, and its row, as NumPy
        arrays in row order."""
        live = np.flatnonzero(
            keras.ops.convert_to_numpy(self.table.state["live"])
        )
        return self.table.slot_keys.numpy()[live], live

    def live_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """`(keys, values)`: every live key and its row's values, as NumPy
        arrays. Under `HybridStrategy` on several workers, every worker's
        keys in rank order (an all-gather: every worker must call it)."""
        keys, rows = self.live_keys()
        values = keras.ops.convert_to_numpy(self.embeddings)[rows]
        comm = self._communicator
        if comm is None or comm.size < 2:
            return keys, values
        gathered_keys, _ = comm.all_gather(tf.constant(keys, tf.int64))
        gathered_values, _ = comm.all_gather(tf.constant(values))
        return gathered_keys.numpy(), gathered_values.numpy()

    def static_equivalent(self) -> keras.Sequential:
        """A stock Keras layer that reads what this one reads now.

        `IntegerLookup` or `StringLookup` over the live keys (unknown keys
        to the out-of-vocabulary index), then an `Embedding` whose rows
        are the default row and the live keys' rows. String keys kept as
        their hashes (under `HybridStrategy`) are hashed first by a
        `keras.layers.Hashing` layer, then looked up by `IntegerLookup`.
        It needs no keras-hybrid to load or serve; it admits and evicts
        nothing. On several workers it holds every worker's keys
        (`live_rows`), and every worker must call it at the same time.

        Raises:
            ValueError: If the table holds no key yet.
        """
        keys, values = self.live_rows()
        return stock_lookup.lookup_and_embedding(
            self.name,
            keys,
            values,
            default=self.default_value.astype(values.dtype),
            mask_zero=self.mask_zero,
            key_dtype=self.key_dtype,
            dtype_policy=self.dtype_policy,
            hashed_strings=self._hashes_strings(),
            key_rank=self._key_rank,
        )

    def _refuse_files_on_workers(self) -> None:
        comm = self._communicator
        if comm is not None and comm.size > 1:
            raise NotImplementedError(
                "The weights of a DynamicEmbedding on several workers "
                "cannot be saved or loaded as Keras weights: each worker "
                f"holds only its own keys' rows. Received: a layer on "
                f"{comm.size} workers. Use `model.save` (it writes the "
                "stock-Keras equivalent, `to_static`) or "
                "`keras_hybrid.callbacks.ShardedCheckpoint` to resume."
            )

    def save_own_variables(self, store) -> None:
        self._refuse_files_on_workers()
        super().save_own_variables(store)
        saved_keys.save(
            store, self.table.slot_keys.numpy(), self._hashes_strings()
        )

    def load_own_variables(self, store) -> None:
        self._refuse_files_on_workers()
        keys = saved_keys.load(
            store,
            self.name,
            strings=self.table_key_dtype == "string",
            hashed_strings=self._hashes_strings(),
        )
        own = {k: store[k] for k in store.keys() if k not in saved_keys.NAMES}
        super().load_own_variables(own)
        self.table.slot_keys.assign(keys)
        self.table.reload()

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            {
                "output_dim": self.output_dim,
                "capacity": self.capacity,
                "admit_after": self.admit_after,
                "eviction": None
                if self.eviction.kind is None
                else str(self.eviction),
                "embeddings_initializer": keras.initializers.serialize(
                    self.embeddings_initializer
                ),
                "embeddings_regularizer": keras.regularizers.serialize(
                    self.embeddings_regularizer
                ),
                "embeddings_constraint": keras.constraints.serialize(
                    self.embeddings_constraint
                ),
                "mask_zero": self.mask_zero,
                "default_value": [float(v) for v in self.default_value],
                "seed": self.seed,
                "key_dtype": self.key_dtype,
            }
        )
        return config


def _communicator_of_strategy():
    """The `Communicator` of the `HybridStrategy` in scope, or None with
    no strategy.

    Raises:
        NotImplementedError: Under another strategy.
    """
    if not tf.distribute.has_strategy():
        return None
    strategy = tf.distribute.get_strategy()
    if not is_hybrid(strategy):
        raise NotImplementedError(
            "DynamicEmbedding runs in one process or under "
            "keras_hybrid.HybridStrategy. Received: a layer built under "
            f"{type(strategy).__name__}. Build the model in "
            "`keras_hybrid.HybridStrategy().scope()`, or without a strategy."
        )
    return strategy.extended.communicator

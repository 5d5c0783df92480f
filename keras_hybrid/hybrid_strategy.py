"""`HybridStrategy`: synchronous data parallelism, one replica per process."""

import atexit
import dataclasses
import functools
import os
import weakref

import numpy as np
import tensorflow as tf
from absl import logging

from keras_hybrid import checkpoint
from keras_hybrid.comm import engines
from keras_hybrid.dynamic import dynamic_table
from keras_hybrid.elastic import joining
from keras_hybrid.patches import registry
from keras_hybrid.plan.cost_rule import Link
from keras_hybrid.sparse import hierarchical_setup
from keras_hybrid.strategy import cluster
from keras_hybrid.strategy import host_random
from keras_hybrid.strategy import log_level
from keras_hybrid.strategy import quiet_ranks
from keras_hybrid.strategy.hybrid_extended import HybridExtended

ENGINE_ENV = "KERAS_HYBRID_ENGINE"
DEFAULT_BUCKET_BYTES = 4 * 1024 * 1024
# How IndexedSlices gradients of dense (replicated) variables are summed.
INDEXED_SLICES = ("allgather", "allgather_unique", "densify")
# What `horovodrun` sets in every worker: with no engine named, these choose
# the Horovod engine.
HOROVOD_ENV = ("HOROVOD_RANK", "HOROVOD_SIZE")


class HybridStrategy(tf.distribute.Strategy):
    """Data-parallel training of unchanged Keras code on many processes.

    Each process is one replica. Start N of them with `keras-hybrid-run -np
    N python train.py`; the launcher tells each where it sits. With no
    cluster in the environment the strategy runs one plain process.

    Batch sizes given to `fit`, `evaluate` and `predict` are global: each
    worker computes on its slice of every global batch. Losses and metrics
    in `History`, in callbacks' `logs` and from `evaluate` are global and
    identical on every rank, and `predict` returns every row, in input
    order, on every rank. Collective calls (`fit`, `evaluate`, `predict`,
    saves, `get_weights` of partitioned tables) must be made on every
    rank: the workers first agree on the call, and a mismatch or a call
    made by one rank alone raises `RuntimeError` (docs/migrating.md).
    Initial values of variables are broadcast from rank 0, so workers that
    seeded differently start identical. Gradients are summed with fused
    all-reduces over the chosen engine.

    With more than one worker the strategy patches Keras (saves write on
    the chief, collective calls are fenced) until it is closed: call
    `close()`, or use it as a context manager (`with HybridStrategy() as
    strategy:`, which does not enter `scope()`); interpreter exit closes
    it too. While it is open, `fit` of a model built outside
    `scope()`, which trains on each worker alone, logs a warning.

    Args:
        cluster_resolver: Optional
            `tf.distribute.cluster_resolver.ClusterResolver` (for example
            `SlurmClusterResolver`). Defaults to `None`: `TF_CONFIG` is read
            if set, else one process.
        engine: Optional string. Communication engine, one of
            `("tf", "horovod")`. Defaults to `None`: the `KERAS_HYBRID_ENGINE`
            environment variable if set, else `"horovod"` if `horovodrun`
            started the process (`HOROVOD_RANK` and `HOROVOD_SIZE` are
            set), else `"tf"` (TensorFlow's collectives). The environment
            variable overrides the argument. With `"horovod"` the cluster
            comes from Horovod (see docs/horovod.md).
        timeout_seconds: Float. How long an eager collective may wait for
            its peers, and how long a peer may stop answering before the
            collectives of a step are aborted (`PeerWatchdog`). Defaults to
            `300`. Not used by the Horovod engine, which has no such
            timeout.
        bucket_bytes: Int. Dense gradients are fused into all-reduces of at
            most this many bytes. Defaults to `4 MiB`.
        log_all_ranks: Boolean. If `False`, ranks other than 0 do not print
            Keras' console output (progress bar, epoch lines); their own
            log lines still show. Defaults to `False`.
        variable_kinds: Optional dict mapping a variable path (e.g.
            `"item_embedding/embeddings"`) or a regex to `"dense"` or
            `"sparse"`, overriding the plan: an exact path wins, else the
            one regex that full-matches; two matching regexes are an error.
            By default placement follows use: a variable the model reads
            only through gathers (an `Embedding` table anywhere in the
            model, a custom weight read with `ops.take`) is partitioned by
            rows when the cost rule finds that cheaper than replicating it;
            everything else is dense (docs/sparse.md).
        indexed_slices: Optional string. How `tf.IndexedSlices` gradients
            of *replicated* variables (a table the plan keeps dense) are
            summed: `"allgather"` all-gathers their rows and ids, one per
            lookup, as stock TensorFlow does; `"allgather_unique"` first
            sums each worker's rows per id (Parallax's local aggregation)
            and all-gathers one row per distinct id; `"densify"` turns them
            into full tensors and all-reduces those. Partitioned tables do
            not use this. Defaults to `None`: per gradient, whichever of
            `"allgather_unique"` and `"densify"` the cost rule finds
            cheaper on `link`.
        link: Optional `keras_hybrid.Link`: bandwidth and latency between
            workers, for the cost rule that decides which tables are
            partitioned (docs/sparse.md). Defaults to `Link()`, 10 Gbit/s
            and 50 us.
        hot_rows: Int. Rows of each partitioned table that every worker
            gets by one all-reduce per step instead of from their owners,
            chosen from running counts by the `HotRowsRefresh` callback;
            they even out the load of the shards under skewed ids
            (docs/architecture.md, "Hot rows"). Results are unchanged.
            Defaults to `0` (off). Not available in elastic jobs.
        hierarchical: Optional bool. With several hosts running equally
            many workers each, `True` moves the rows of partitioned tables
            hierarchically: ids are deduplicated per host and cross hosts
            once, among workers of equal local rank, and pushes are summed
            in the host before they cross (docs/strategy.md). `False`: one
            flat exchange among all workers. Defaults to `None`: on where
            the cost model says it pays, decided at the first step. Where
            it cannot run (one host, one worker per host, unequal hosts,
            elastic jobs, Horovod) the exchange is flat and the reason is
            logged. Results are the same either way.

    Example:

    ```python
    strategy = keras_hybrid.HybridStrategy()
    with strategy.scope():
        model = build_model()
        model.compile(optimizer="adam", loss="mse", metrics=["mae"])
    model.fit(x, y, batch_size=256, epochs=3)
    ```

    Raises:
        ValueError: If `engine` or `indexed_slices` is unknown,
            `timeout_seconds` or
            `bucket_bytes` is not positive, `hot_rows` is negative, or
            the cluster is malformed.
        TypeError: If `cluster_resolver` is not a `ClusterResolver`,
            `hot_rows` is not an int, or `hierarchical` not a bool or
            `None`.
        NotImplementedError: If `hot_rows` is set in an elastic job.
        ImportError: If `engine` is `"horovod"` and Horovod with its
            TensorFlow ops is not installed (the message gives the build
            command).
    """

    def __init__(
        self,
        cluster_resolver=None,
        engine: str | None = None,
        timeout_seconds: float = 300.0,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        log_all_ranks: bool = False,
        variable_kinds: dict | None = None,
        indexed_slices: str | None = None,
        link: Link | None = None,
        hot_rows: int = 0,
        hierarchical: bool | None = None,
    ) -> None:
        engine = _choose_engine(engine)
        if link is not None and not isinstance(link, Link):
            raise TypeError(
                f"`link` must be a `keras_hybrid.Link`. Received: link={link!r}"
            )
        if indexed_slices is not None and indexed_slices not in INDEXED_SLICES:
            raise ValueError(
                f"`indexed_slices` must be one of {INDEXED_SLICES}. Received: "
                f"indexed_slices={indexed_slices!r}"
            )
        _check_positive("timeout_seconds", timeout_seconds)
        _check_positive("bucket_bytes", bucket_bytes)
        _check_hot_rows(hot_rows)
        hierarchical_setup.check(hierarchical)
        log_level.apply()
        if engine == "horovod":
            info = cluster.resolve_horovod(cluster_resolver)
        else:
            info = cluster.resolve(cluster_resolver)
            cluster.start_server(info)
        membership = joining.membership_for(engine, info)
        if hot_rows and membership is not None:
            raise NotImplementedError(
                "Hot rows are not supported in elastic jobs yet: their "
                "running counts follow the shard's rows, which a resize "
                f"moves. Received: hot_rows={hot_rows} in an elastic job. "
                "Drop `hot_rows` or run without `--max-np`."
            )
        rank, size = info.rank, info.size
        if membership is not None:
            rank, size = membership.rank, membership.size
        comm = engines.make_communicator(
            engine, rank, size, float(timeout_seconds), int(bucket_bytes)
        )
        hierarchical_setup.configure(
            comm, info, engine, membership is not None, hierarchical
        )
        self._cluster_info = info
        self._engine = engine
        if engine == "tf" and info.size > 1:
            watchdog = cluster.start_watchdog(info, timeout_seconds)
            if membership is not None:
                comm.membership = membership
                watchdog.set_peers(
                    [t for t in membership.members if t != info.rank]
                )
        super().__init__(
            HybridExtended(
                self,
                _local_device(info),
                comm,
                variable_kinds,
                indexed_slices,
                link,
            )
        )
        self.extended.router.hot_rows = int(hot_rows)
        if info.rank != 0 and not log_all_ranks:
            quiet_ranks.quiet_keras_console()
        if membership is None:
            self._agree_on_random_seed()
        else:
            joining.share_seed()
        self._closed = False
        self._in_use = False
        self._close_at_exit = None

    def scope(self):
        """Returns the context manager in which variables are created on
        this strategy (see `tf.distribute.Strategy.scope`).

        The first call puts the strategy's Keras patches in (see `close`;
        one process needs only `patches/build_from_spec.py`): a strategy
        that is never used changes nothing.
        """
        self._use()
        return super().scope()

    def _use(self) -> None:
        # The cluster's size: an elastic joiner counts as one worker until
        # it is admitted, but needs the patches from the start.
        if self._in_use or self._closed:
            return
        self._in_use = True
        registry.acquire(
            self,
            elastic=self.communicator.__dict__.get("membership") is not None,
            one_process=self._cluster_info.size == 1,
        )
        # Weakly, so that an unclosed strategy can still be collected.
        self._close_at_exit = functools.partial(
            _close_at_exit, weakref.ref(self)
        )
        atexit.register(self._close_at_exit)

    # -- lifetime

    def close(self) -> None:
        """Takes this strategy's patches out of Keras (idempotent).

        A multi-worker strategy, from its first `scope()`, patches Keras
        for the process (saves and file-writing callbacks write on the
        chief only, collective calls are fenced, `LossScaleOptimizer`
        agrees on finite gradients); one of one process only builds
        models from their dataset's spec. Once every open strategy is
        closed, Keras is stock again and the peer
        watchdog stops. Models built under a closed strategy must not be
        trained, evaluated or saved any more. Exiting a `with` block
        closes the strategy; interpreter exit closes any left open.

        ```python
        with keras_hybrid.HybridStrategy() as strategy:
            with strategy.scope():
                model = build_model()
            model.fit(x, y)
        # Keras is stock here.
        ```
        """
        if self._closed:
            return
        self._closed = True
        if self._close_at_exit is not None:
            atexit.unregister(self._close_at_exit)
            self._close_at_exit = None
        if self._in_use:
            registry.release(self)
        elif self._cluster_info.size > 1 and registry.open_count() == 0:
            cluster.stop_watchdog()  # what the last release would do

    @property
    def closed(self) -> bool:
        """Boolean. Whether `close` was called."""
        return self._closed

    def __enter__(self) -> "HybridStrategy":
        """Puts the strategy's patches in (as the first `scope()` does)
        and returns the strategy; it does not enter `scope()`."""
        self._use()
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # -- where this process sits

    @property
    def rank(self) -> int:
        """Int. Index of this worker process, 0 for the chief. Under
        elastic training, the index among the current members."""
        return self.communicator.rank

    @property
    def size(self) -> int:
        """Int. Number of worker processes (= `num_replicas_in_sync`);
        under elastic training, the current members."""
        return self.communicator.size

    @property
    def is_chief(self) -> bool:
        """Boolean. Whether this is rank 0, which writes files and logs."""
        return self.communicator.rank == 0

    @property
    def engine(self) -> str:
        """String. The communication engine in use."""
        return self._engine

    @property
    def communicator(self):
        """The `keras_hybrid.comm.Communicator` (with its `stats`)."""
        return self.extended.communicator

    @property
    def plan(self):
        """`RoutingPlan` of the trainable variables created so far: kind
        (dense or sparse), shape, bytes, and row layout of each, and the
        tables of `DynamicEmbedding` layers (kind dynamic).
        `print(strategy.plan)` shows it as a table."""
        plan = self.extended.router.plan()
        return dataclasses.replace(
            plan, dynamic=dynamic_table.plan_entries(self.communicator)
        )

    # -- helpers for users

    def gather_variable(self, variable) -> np.ndarray:
        """The full value of `variable`, gathered if it is partitioned.

        Heavy for a partitioned table: every worker must call it at the
        same time (it is a collective) and each gets the whole table.
        `model.get_weights()` and `layer.get_weights()` do the same.

        Args:
            variable: A `keras.Variable` or `tf.Variable`.

        Returns:
            A NumPy array with the variable's full value.
        """
        return np.asarray(variable.numpy())

    def save_checkpoint(self, model, directory: str, **kwargs) -> str:
        """Saves a sharded checkpoint of `model`: each worker writes its own
        table rows in parallel. Every worker must call it. See
        `keras_hybrid.checkpoint.save_checkpoint` for the arguments."""
        return checkpoint.save_checkpoint(
            model, directory, strategy=self, **kwargs
        )

    def restore_checkpoint(self, model, path: str) -> dict:
        """Restores a sharded checkpoint saved by any number of workers.
        Every worker must call it. See
        `keras_hybrid.checkpoint.restore_checkpoint`."""
        return checkpoint.restore_checkpoint(model, path, strategy=self)

    def gather_predictions(self, predictions, batch_size: int):
        """Deprecated: returns `predictions` unchanged.

        `model.predict` returns every row, in input order, on every
        rank; gathering again would duplicate rows. Logs a deprecation
        warning once.

        Args:
            predictions: The output of `model.predict`.
            batch_size: Int. Ignored.

        Returns:
            `predictions`.
        """
        del batch_size
        logging.log_first_n(
            logging.WARNING,
            "keras-hybrid: `HybridStrategy.gather_predictions` is "
            "deprecated and does nothing: `model.predict` returns every "
            "row, in input order, on every rank. Remove the call.",
            1,
        )
        return predictions

    def _agree_on_random_seed(self) -> None:
        """Gives every worker rank 0's TF global seed
        (`host_random.global_seed`: TensorFlow's default if unset).

        Keras shuffles `fit` data with TF random ops; workers must draw the
        same permutation, or slices of a global batch would overlap. A
        dataset shuffled with its own seed orders as in one process. Rank
        0's Python and NumPy random states go with it (`host_random`:
        Keras shuffles a `PyDataset` with Python's `random`).
        """
        if self.size == 1:
            return
        seed = self.communicator.broadcast(
            tf.constant([host_random.global_seed()], tf.int64), root=0
        )
        seed = int(seed.numpy()[0])
        tf.random.set_seed(seed)
        logging.info("keras-hybrid: TF global seed %d on all ranks", seed)
        host_random.share_from_rank0(self.communicator)


def _close_at_exit(strategy_ref) -> None:
    strategy = strategy_ref()
    if strategy is not None:
        strategy.close()


def _choose_engine(engine: str | None) -> str:
    from_env = os.environ.get(ENGINE_ENV)
    if from_env:
        if engine is not None and engine != from_env:
            logging.warning(
                "%s=%s overrides engine=%r.", ENGINE_ENV, from_env, engine
            )
        engine = from_env
    if engine is None:
        started_by_horovodrun = all(v in os.environ for v in HOROVOD_ENV)
        engine = "horovod" if started_by_horovodrun else "tf"
    if engine not in engines.ENGINES:
        raise ValueError(
            f"`engine` must be one of {engines.ENGINES}. Received: "
            f"engine={engine!r} (argument or {ENGINE_ENV})."
        )
    return engine


def _check_hot_rows(hot_rows) -> None:
    if isinstance(hot_rows, bool) or not isinstance(hot_rows, int):
        raise TypeError(
            "`hot_rows` must be an int (rows per table replicated on every "
            f"worker). Received: hot_rows={hot_rows!r}"
        )
    if hot_rows < 0:
        raise ValueError(
            "`hot_rows` must be >= 0 (0 turns hot rows off). Received: "
            f"hot_rows={hot_rows}"
        )


def _check_positive(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            f"`{name}` must be a number. Received: {name}={value!r}"
        )
    if value <= 0:
        raise ValueError(f"`{name}` must be > 0. Received: {name}={value}")


def _local_device(info: cluster.ClusterInfo) -> str:
    """The device of this replica: its first GPU, else its CPU."""
    if tf.config.list_physical_devices("GPU"):
        return info.device.replace("CPU", "GPU")
    return info.device

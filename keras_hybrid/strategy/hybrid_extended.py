"""The `StrategyExtended` behind `HybridStrategy`: one replica per process.

TF reaches it through the private hooks that `_compat.OneProcessExtended`
names; here they are implemented:
- `run_replica_step`: decides placement by use, runs the step in a replica
  context whose replica id is this rank, makes a Keras model's logs and
  `predict` outputs global;
- `reduce_values`: dense gradients all-reduced, pushed table gradients
  taken as they are, other `IndexedSlices` summed as the cost rule chose;
- `create_variable`: the `VariableRouter` places every variable, but
  those created in `local_variables.scope()` stay this worker's own;
- `update_variable`: the owner updates its rows (and row constraints);
- `distribute_dataset`: each worker's slice of every global batch.

Keras' TF optimizer sends every gradient through the replica context's
`all_reduce`, which reaches `reduce_values` here through `merge_call`.
"""

import contextlib

import keras
import tensorflow as tf
from absl import logging

from keras_hybrid._compat import keras as keras_compat
from keras_hybrid._compat.one_process_extended import OneProcessExtended
from keras_hybrid.plan import cost_rule
from keras_hybrid.plan import use_discovery
from keras_hybrid.sparse import fused_exchange
from keras_hybrid.sparse import hierarchical_setup
from keras_hybrid.sparse import prefetch
from keras_hybrid.sparse import sharded_table
from keras_hybrid.sparse import table_gradients
from keras_hybrid.strategy import averaged_state
from keras_hybrid.strategy import batch_share
from keras_hybrid.strategy import global_metrics
from keras_hybrid.strategy import global_predictions
from keras_hybrid.strategy import global_read_variable
from keras_hybrid.strategy import input_sharding
from keras_hybrid.strategy import local_variables
from keras_hybrid.strategy import placement_trace
from keras_hybrid.strategy import step_state
from keras_hybrid.strategy.global_read_variable import GlobalReadVariable
from keras_hybrid.strategy.variable_router import VariableRouter

_ON_READ = tf.VariableSynchronization.ON_READ
_REDUCE_OPS = {
    tf.distribute.ReduceOp.SUM: "sum",
    tf.distribute.ReduceOp.MEAN: "mean",
}


class _HybridReplicaContext(tf.distribute.ReplicaContext):
    """Replica context of this process: replica id = rank."""

    @property
    def devices(self):
        return self.strategy.extended.worker_devices


class HybridExtended(OneProcessExtended):
    """Extended of `HybridStrategy` (see the module docstring)."""

    def __init__(
        self,
        container_strategy,
        device,
        communicator,
        variable_kinds=None,
        indexed_slices=None,
        link=None,
    ) -> None:
        super().__init__(container_strategy, device)
        self._communicator = communicator
        self._indexed_slices = indexed_slices
        self._link = link or cost_rule.Link()
        self._warned_indexed_slices = False
        # Whether traced steps fuse the exchanges of their lookups
        # (`sparse.fused_exchange`); `False` gives one exchange per lookup.
        self.fuse_lookups = True
        self.router = VariableRouter(communicator, variable_kinds, self._link)

    @property
    def communicator(self):
        return self._communicator

    @property
    def traced_size_dependent_collectives(self) -> bool:
        """Whether a traced step holds collectives whose shapes follow the
        number of workers (all-gathers of `IndexedSlices`), so that an
        elastic resize must trace it again."""
        return self._warned_indexed_slices

    def _elastic_rows(self, args):
        """The global batch's rows, which an elastic worker sees whole;
        None in a fixed job (`batch_share` sums the slices)."""
        if getattr(self._communicator, "membership", None) is None:
            return None
        return batch_share.rows_of(args)

    def _elastic_slice(self, args):
        """This worker's slice of each global batch in `args`, under an
        elastic job (the slice follows the current members)."""
        membership = getattr(self._communicator, "membership", None)
        if membership is None:
            return args
        rank, size = membership.rank_and_size()
        return input_sharding.slice_rows(args, rank, size)

    # -- replica execution

    def run_replica_step(self, fn, args, kwargs):
        if sharded_table.in_step():
            return self._run_nested(fn, args, kwargs)
        with sharded_table.step_trace():
            return self._run_step(fn, args, kwargs)

    def _run_nested(self, fn, args, kwargs):
        """A replica call made inside a step (Keras' `LossScaleOptimizer`
        applies its gradients through `merge_call` and then
        `call_for_each_replica`): its arguments are the step's gradients and
        variables, not a batch, so none of a step's work applies (no
        placement, no input slicing, no lookups traced ahead, no step-end
        reduction); it runs in the step's replica context."""
        strategy = self.container_strategy()
        with (
            tf.device(self.device),
            _HybridReplicaContext(
                strategy, replica_id_in_sync_group=self._communicator.rank
            ),
            global_read_variable.local_reads(),
        ):
            return fn(*args, **kwargs)

    def _run_step(self, fn, args, kwargs):
        strategy = self.container_strategy()
        with (
            tf.device(self.device),
            _HybridReplicaContext(
                strategy, replica_id_in_sync_group=self._communicator.rank
            ),
        ):
            model = global_metrics.keras_model_of_step(fn)
            if model is not None:
                _check_created_in_scope(self, model)
            with global_read_variable.local_reads():
                placement_trace.place_by_use(self.router, fn, args, kwargs)
            if model is not None and model.optimizer is not None:
                _check_optimizer(model.optimizer, model.trainable_variables)
            self.router.warn_unused_overrides()
            global_rows = self._elastic_rows(args)
            args = self._elastic_slice(args)
            with (
                batch_share.step(args, self._communicator, global_rows),
                global_read_variable.local_reads(),
                self._fused_lookups(fn, args, kwargs),
                averaged_state.recording() as assigned,
            ):
                outputs = fn(*args, **kwargs)
            if not tf.executing_eagerly():
                sharded_table.check_whole_reads(
                    tf.compat.v1.get_default_graph()
                )
            if model is not None and not (
                use_discovery.active() or prefetch.active()
            ):
                outputs = step_state.reduce_after_step(
                    model,
                    assigned,
                    outputs,
                    self._communicator,
                    rows=batch_share.rows_of(args),
                )
            outputs = global_predictions.gather_outputs(
                outputs, self._communicator
            )
            return outputs

    def _fused_lookups(self, fn, args, kwargs):
        """A scope in which the traced step's lookups share one exchange
        (`sparse.fused_exchange`), when their ids can be found ahead
        (`sparse.prefetch`). Eager steps, elastic jobs (whose padded
        exchange follows the members) and `fuse_lookups = False` keep one
        exchange per lookup."""
        comm = self._communicator
        if (
            not self.fuse_lookups
            or tf.executing_eagerly()
            or comm.size == 1
            or getattr(comm, "membership", None) is not None
            or prefetch.active()
            or not self.router.sharded_tables()
        ):
            return contextlib.nullcontext()
        with global_read_variable.local_reads():
            plan = prefetch.discover(fn, args, kwargs)
        if plan.ids_fn is None:
            return contextlib.nullcontext()
        ids = plan.ids_fn(args, kwargs)
        if comm.hierarchical is None:
            hierarchical_setup.decide(comm, plan.prefetched(), ids, self._link)
        return fused_exchange.step(plan, ids, comm)

    @property
    def replica_count(self) -> int:
        return self._communicator.size

    @property
    def should_checkpoint(self):
        return self._communicator.rank == 0

    @property
    def should_save_summary(self):
        return self._communicator.rank == 0

    # -- reductions

    def reduce_values(self, reduce_op, values):
        op = _REDUCE_OPS.get(tf.distribute.ReduceOp(reduce_op))
        if op is None:
            raise ValueError(
                "HybridStrategy reduces with SUM or MEAN. Received: "
                f"reduce_op={reduce_op}"
            )
        if use_discovery.active() or prefetch.active():
            return list(values)  # a scratch trace: never run
        syncs = [self._sync_of(v) for v in values]
        values = [
            tf.convert_to_tensor(v) if sync == "allreduce" else v
            for v, sync in zip(values, syncs, strict=True)
        ]
        results = list(values)
        dense = [
            i
            for i, v in enumerate(values)
            if not isinstance(v, tf.IndexedSlices)
        ]
        if dense:
            reduced = self._communicator.all_reduce(
                [values[i] for i in dense], op=op, path="dense"
            )
            for i, value in zip(dense, reduced, strict=True):
                results[i] = value
        for i, value in enumerate(values):
            if table_gradients.table_of(value) is not None:
                # Pushed to this owner already, summed over workers.
                results[i] = table_gradients.aggregate(value)
            elif isinstance(value, tf.IndexedSlices):
                results[i] = self._gather_indexed_slices(
                    value, op, unique=syncs[i] == "allgather_unique", key=i
                )
        return results

    def _sync_of(self, value) -> str:
        """How the `IndexedSlices` gradient of a replicated variable is
        summed: as `indexed_slices` says, else the cost rule's choice."""
        if not isinstance(value, tf.IndexedSlices):
            return "dense"
        if table_gradients.table_of(value) is not None:
            return "pushed"
        if self._indexed_slices is not None:
            return {"densify": "allreduce"}.get(
                self._indexed_slices, self._indexed_slices
            )
        shape = tf.get_static_value(value.dense_shape)
        if shape is None or len(shape) == 0 or self._communicator.size == 1:
            return "allgather_unique"
        rows, row_bytes = int(shape[0]), value.dtype.size
        for d in shape[1:]:
            row_bytes *= int(d)
        lookups = cost_rule.lookups_of(value.indices.shape)
        # For the most workers an elastic job can have (`width`): every
        # process, a joiner tracing before admission included, must choose
        # alike whatever the size when it traced; an all-gather then makes
        # every resize trace the step again on every process.
        return cost_rule.table_cost(
            rows, row_bytes, lookups, self._communicator.width, self._link
        ).dense_sync

    def _gather_indexed_slices(self, value, op, unique: bool, key: int):
        """IndexedSlices sum: all-gather of rows and ids, never densified,
        then one row per id. With `unique`, each worker first sums its own
        rows per id, so one row per distinct id crosses the network
        instead of one per lookup (the same sum, in another order); their
        count then changes every step, so the gathers are keyed by the
        gradient's place `key` (see `Communicator.all_gather`)."""
        if not self._warned_indexed_slices:
            logging.info(
                "keras-hybrid: IndexedSlices gradients are all-gathered "
                "(rows and ids, not densified%s).",
                ", one row per id and worker" if unique else "",
            )
            self._warned_indexed_slices = True
        comm = self._communicator
        site = None
        if unique:
            value = table_gradients.aggregate(value)
            shape = "x".join(str(d) for d in value.values.shape[1:])
            site = f"slices{key}_{shape}"
        rows, _ = comm.all_gather(value.values, path="sparse_push", key=site)
        ids, _ = comm.all_gather(value.indices, path="ids", key=site)
        if op == "mean":
            rows = rows / tf.cast(comm.size, rows.dtype)
        # One row per id, as a partitioned table's pushed gradient and a
        # densified one have: Adam and Adagrad then see the same gradient
        # whichever way a table's gradient was summed, on any number of
        # workers (stock Keras squares each duplicate separately).
        return table_gradients.aggregate(
            tf.IndexedSlices(rows, ids, value.dense_shape)
        )

    def gather_values(self, value, axis):
        value = tf.convert_to_tensor(value)
        perm = None
        if axis != 0:
            perm = [axis] + [d for d in range(value.shape.rank) if d != axis]
            value = tf.transpose(value, perm)
        gathered, _ = self._communicator.all_gather(value)
        if perm is not None:
            gathered = tf.transpose(gathered, tf.math.invert_permutation(perm))
        return gathered

    # -- variables

    def update_variable(self, var, fn, args, kwargs, group):
        if args:
            self._check_in_step(var, args[0])
            self.router.observe_gradient(var, args[0])
        fused_exchange.note_update(var)
        # The optimizer sees (and writes) the rows this shard owns, or
        # of a local table, its rows in use.
        with sharded_table.shard_view():
            if local_variables.has_rows_in_use(var):

                def update(args):
                    return self.stock_update(var, fn, args, kwargs, group)

                return local_variables.update_rows_in_use(var, args, update)
            result = self.stock_update(var, fn, args, kwargs, group)
            constraint = getattr(var, "row_constraint", None)
            if constraint is not None and args:
                # Keras applies constraints after the update; the owner
                # does it for its rows (`sparse.shard_regularizers`).
                var.assign(constraint(tf.convert_to_tensor(var)))
            return result

    def _check_in_step(self, var, grad) -> None:
        """Refuses a partitioned table's pushed gradient applied outside a
        replica step: there the dense gradients stay each worker's own
        (Keras all-reduces only in a replica context) while the table's
        were summed over workers, and the model would silently train on a
        mix of the two."""
        if sharded_table.in_step() or self._communicator.size == 1:
            return
        if table_gradients.table_of(grad) is None:
            return
        raise RuntimeError(
            f"The gradient of partitioned table {var.path!r} is applied "
            "outside a replica step: a `tf.function` of your own calls the "
            "model and `optimizer.apply` directly. With several workers, "
            "run the step with `strategy.run(step_fn, args=...)`, on a "
            "dataset from `strategy.experimental_distribute_dataset`, or "
            "train with `model.fit`."
        )

    def create_variable(self, next_creator, kwargs):
        with tf.device(self.device):
            if kwargs.get("synchronization") == _ON_READ:
                return self._create_global_read_variable(kwargs)
            if local_variables.active() or local_variables.is_local(
                kwargs.get("colocate_with")
            ):
                # This worker's own (a dynamic table's shard, or a slot
                # of one): neither partitioned nor broadcast.
                return local_variables.create(next_creator, kwargs)

            def make_dense():
                if self._communicator.size > 1:
                    kwargs["initial_value"] = self._broadcast_initial_value(
                        kwargs["initial_value"], kwargs.get("dtype")
                    )
                return next_creator(**kwargs)

            return self.router.create(next_creator, kwargs, make_dense)

    def _broadcast_initial_value(self, initial_value, dtype):
        comm = self._communicator

        def broadcast_from_chief():
            value = (
                initial_value() if callable(initial_value) else (initial_value)
            )
            value = tf.convert_to_tensor(value, dtype=dtype)
            return comm.broadcast(value, root=0, path="control")

        return broadcast_from_chief

    def _create_global_read_variable(self, kwargs):
        aggregation = kwargs.get("aggregation")
        reduce_op = (
            "mean" if aggregation == tf.VariableAggregation.MEAN else "sum"
        )
        allowed = (
            "initial_value",
            "trainable",
            "name",
            "dtype",
            "shape",
            "constraint",
            "validate_shape",
            "caching_device",
        )
        init_kwargs = {k: kwargs[k] for k in allowed if k in kwargs}
        init_kwargs["trainable"] = False
        # Keywords only: tf.Variable's metaclass takes the first positional
        # argument for `initial_value`.
        return GlobalReadVariable(
            communicator=self._communicator,
            reduce_op=reduce_op,
            **init_kwargs,
        )

    # -- input

    def distribute_dataset(self, dataset):
        return input_sharding.for_workers(dataset, self._communicator)

    def distribute_datasets_from_function(self, dataset_fn):
        return input_sharding.from_function(dataset_fn, self._communicator)

    def distribute_values_from_function(self, value_fn):
        comm = self._communicator
        return value_fn(
            tf.distribute.experimental.ValueContext(comm.rank, comm.size)
        )


def is_hybrid(strategy) -> bool:
    """Whether `strategy` is a `HybridStrategy`, told by its extended (so
    that modules the strategy installs need not import it)."""
    return isinstance(getattr(strategy, "extended", None), HybridExtended)


def multi_worker_step_strategy():
    """The `HybridStrategy` of the replica step running now if it has
    several workers, else None (no step, another strategy, one worker)."""
    context = tf.distribute.get_replica_context()
    strategy = getattr(context, "strategy", None)
    if is_hybrid(strategy) and strategy.size > 1:
        return strategy
    return None


def _check_created_in_scope(extended, model) -> None:
    """Refuses, before tracing, a model whose trainable variables were
    created outside the strategy's scope: the strategy never placed them,
    so they miss rank 0's initial values and would train apart on each
    worker (every `tf.distribute` strategy requires the scope)."""
    outside = [
        variable.path
        for variable in model.trainable_variables
        if not extended.variable_created_in_scope(
            keras_compat.variable_storage(variable)
        )
    ]
    if outside:
        shown = ", ".join(outside[:5])
        more = f" and {len(outside) - 5} more" if len(outside) > 5 else ""
        raise ValueError(
            f"HybridStrategy cannot train {model.name!r}: its variables "
            f"{shown}{more} were created outside `strategy.scope()`. "
            "Create the model, its layers and their first call (which "
            "builds their weights) inside `with strategy.scope():`, as "
            "every tf.distribute strategy requires."
        )


def _check_optimizer(optimizer, variables) -> None:
    """Refuses, before tracing, optimizers that cannot update a shard."""
    from keras_hybrid.optimizers import sparse_support
    from keras_hybrid.optimizers.hybrid_optimizer import HybridOptimizer

    # `compile` wraps any optimizer in a `LossScaleOptimizer` under
    # "mixed_float16"; what updates the tables is the one inside.
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        optimizer = optimizer.inner_optimizer
    wrapped = isinstance(optimizer, HybridOptimizer)
    inner = optimizer.inner_optimizer if wrapped else optimizer
    sparse_support.check(inner, variables, wrapped=wrapped)

"""The private TensorFlow and Keras hooks keras_hybrid relies on, tested.

One test class per group of hooks, named in its docstring with the module
of keras_hybrid that uses it. Each test exercises the hook itself (that it
exists and does what the package relies on), never the package, so a
failure names what moved in this TF or Keras version. Runs in every
environment of the version matrix: `make test` (TF 2.21), `make
test-horovod` (TF 2.15.1) and `make test-matrix` (MATRIX_TF).
"""

import functools
import gc
import inspect
import json
import logging
import os
import subprocess
import sys
import tempfile
from unittest import mock

import keras
import numpy as np
import tensorflow as tf
from absl import logging as absl_logging
from keras.src import export as keras_export
from keras.src.backend.common import global_state
from keras.src.callbacks import backup_and_restore
from keras.src.callbacks import csv_logger
from keras.src.callbacks import model_checkpoint
from keras.src.optimizers.base_optimizer import BaseOptimizer
from keras.src.saving import saving_api
from keras.src.saving import saving_lib
from keras.src.saving import serialization_lib
from keras.src.utils import file_utils
from keras.src.utils import io_utils
from tensorflow.core.protobuf import tensorflow_server_pb2
from tensorflow.python.data.experimental.ops import distribute as tf_data
from tensorflow.python.distribute import distribute_lib
from tensorflow.python.distribute import input_ops
from tensorflow.python.distribute import one_device_strategy
from tensorflow.python.eager import context
from tensorflow.python.framework import errors
from tensorflow.python.framework import indexed_slices
from tensorflow.python.ops import collective_ops
from tensorflow.python.ops import resource_variable_ops

from keras_hybrid._compat import keras as keras_compat
from keras_hybrid._compat import tf as tf_compat
from keras_hybrid._compat.one_process_extended import OneProcessExtended
from keras_hybrid.testing import TestCase

# A group key no other test uses: TF keeps a group's size per process.
_GROUP = 4242
_RESET_SCRIPT = """
import json
import tensorflow as tf
from keras_hybrid._compat import tf as tf_compat
from keras_hybrid.launch.topology import free_ports

def spec():
    return tf.train.ClusterSpec(
        {"worker": [f"127.0.0.1:{free_ports(1)[0]}"]})

def all_reduce(x, key):
    return tf_compat.all_reduce(
        x, group_size=1, group_key=key, instance_key=1, merge_op="Add",
        final_op="Id", timeout=30)

tf.random.set_seed(7)
tf_compat.enable_collectives(spec(), "worker", 0, "grpc")
v = tf.Variable([1.0, 2.0])
all_reduce(v.read_value(), 5)
import keras
lookup = keras.layers.StringLookup(vocabulary=["a", "b", "c"])
ids = tf.data.Dataset.from_tensor_slices(["c", "a", "zz"]).batch(3).map(lookup)
before = next(iter(ids)).numpy().tolist()
tf_compat.abort_collectives("peer lost")
try:
    all_reduce(v.read_value(), 6)
    aborted_fails = False
except tf.errors.UnavailableError:
    aborted_fails = True
tf_compat.reset_collectives(spec(), "worker", 0, "grpc")
v.assign_add([1.0, 1.0])
# TF 2.21: `assign` to a variable made before the reset does nothing (the
# elastic recovery gives Keras variables new storage instead).
v.assign([9.0, 9.0])
out = all_reduce(tf.constant([3.0, 3.0]), 7)
print(json.dumps({
    "lookups": [before, next(iter(ids)).numpy().tolist(),
                lookup(tf.constant(["b"])).numpy().tolist()],
    "aborted_fails": aborted_fails,
    "after_reset": out.numpy().tolist(),
    "old_variable": v.numpy().tolist(),
    "seed": tf.compat.v1.random.get_seed(None)[0],
}))
"""

_LEADER_SCRIPT = """
import json, sys
import tensorflow as tf
from keras_hybrid._compat import tf as tf_compat

task, first, second = int(sys.argv[1]), sys.argv[2], sys.argv[3]

def spec(ports):
    return tf.train.ClusterSpec(
        {"worker": [f"127.0.0.1:{p}" for p in ports.split(",")]})

def all_reduce(key):
    return float(tf_compat.all_reduce(
        tf.constant([float(task)]), group_size=2, group_key=key,
        instance_key=1, merge_op="Add", final_op="Id", timeout=60)[0])

# Task 0 never runs: task 1 leads, then (a new context) task 2.
tf_compat.enable_collectives(spec(first), "worker", task, "grpc", leader=1)
before = all_reduce(11)
tf_compat.reset_collectives(spec(second), "worker", task, "grpc", leader=2)
print(json.dumps({"before": before, "after": all_reduce(12)}))
"""


def _params(fn) -> set:
    return set(inspect.signature(fn).parameters)


def _tiny_model(rows=8):
    ids = keras.Input(shape=(2,), dtype="int32")
    pooled = keras.layers.GlobalAveragePooling1D()(
        keras.layers.Embedding(rows, 2, name="items")(ids)
    )
    return keras.Model(ids, keras.layers.Dense(1, name="head")(pooled))


def _tiny_data(n=4, rows=8):
    ids = (np.arange(n * 2).reshape(n, 2) % rows).astype("int32")
    return ids, np.ones((n, 1), "float32")


class CollectiveOpsTest(TestCase):
    """`comm/tf_communicator.py`: `collective_ops.*_v2`, with the instance
    key as a tensor (one traced op picks its key per step)."""

    USED = {
        "all_reduce_v2": {"merge_op", "final_op"},
        "all_gather_v2": set(),
        "all_to_all_v2": set(),
        "broadcast_send_v2": set(),
        "broadcast_recv_v2": {"shape", "dtype"},
    }
    COMMON = {"group_size", "group_key", "instance_key", "timeout"}

    def test_v2_ops_take_the_keywords_used(self):
        for name, extra in self.USED.items():
            op = getattr(collective_ops, name)
            self.assertLessEqual(self.COMMON | extra, _params(op), name)

    def test_ops_run_in_a_group_of_one_with_tensor_keys(self):
        kwargs = dict(group_size=1, group_key=_GROUP, timeout=30)

        @tf.function
        def run(x, key):
            total = collective_ops.all_reduce_v2(
                x, instance_key=key, merge_op="Max", final_op="Id", **kwargs
            )
            gathered = collective_ops.all_gather_v2(
                x, instance_key=key + 1, **kwargs
            )
            swapped = collective_ops.all_to_all_v2(
                x, instance_key=key + 2, **kwargs
            )
            return total, gathered, swapped

        x = tf.constant([[1.0, 2.0]])
        for key in (10, 20):  # the same trace, two instance keys
            for out in run(x, tf.constant(key)):
                self.assertAllClose(out, x)
        self.assertEqual(run.experimental_get_tracing_count(), 1)


class ClusterContextTest(TestCase):
    """`strategy/cluster.py` and `comm/peer_watchdog.py`: the eager
    context's collective set-up, peer probes and abort, and `ServerDef`.
    (`enable_collective_ops` itself runs in the 2-worker smoke test.)"""

    def test_context_methods_take_the_arguments_used(self):
        ctx = context.context()
        used = {
            "configure_collective_ops": {"collective_leader", "device_filters"},
            "enable_collective_ops": {"server_def"},
            "ensure_initialized": set(),
            "check_collective_ops_peer_health": {"task", "timeout_in_ms"},
            "abort_collective_ops": {"code", "message"},
        }
        for name, params in used.items():
            self.assertLessEqual(params, _params(getattr(ctx, name)), name)

    def test_server_def_carries_the_cluster_and_leader(self):
        spec = tf.train.ClusterSpec({"worker": ["localhost:1", "localhost:2"]})
        config = context.context().config
        config.experimental.collective_group_leader = "/job:worker/task:0"
        server_def = tensorflow_server_pb2.ServerDef(
            cluster=spec.as_cluster_def(),
            default_session_config=config,
            job_name="worker",
            task_index=1,
            protocol="grpc",
        )
        self.assertEqual(server_def.task_index, 1)
        experimental = server_def.default_session_config.experimental
        self.assertEqual(
            experimental.collective_group_leader, "/job:worker/task:0"
        )

    def test_unavailable_is_the_public_error_code(self):
        self.assertEqual(errors.UNAVAILABLE, tf.errors.UNAVAILABLE)

    def test_context_tells_it_has_started(self):
        tf.constant(1.0)  # starts it, if nothing had
        self.assertTrue(context.context()._initialized)
        self.assertTrue(tf_compat.eager_context_started())

    def test_reset_context_exists(self):
        self.assertTrue(callable(context._reset_context))
        self.assertEqual(_params(context._reset_context), set())


class InputShardingTest(TestCase):
    """`strategy/input_sharding.py`: the FILE policy's rebatch and shard,
    as `MultiWorkerMirroredStrategy` does them."""

    def test_rebatch_and_shard_split_each_global_batch(self):
        dataset = tf.data.Dataset.range(8).batch(4)
        options = tf.data.Options()
        policy = tf.data.experimental.AutoShardPolicy.DATA
        options.experimental_distribute.auto_shard_policy = policy
        dataset = dataset.with_options(options)
        self.assertEqual(int(tf_data.compute_batch_size(dataset)), 4)
        seen = []
        for rank in range(2):
            sizes = tf_data.batch_sizes_for_worker(4, 2, 1, rank)
            local = input_ops.auto_shard_dataset(
                dataset.rebatch(sizes), 2, rank, 2
            )
            batches = [b.numpy().tolist() for b in local]
            self.assertEqual([len(b) for b in batches], [2, 2])
            seen += [i for b in batches for i in b]
        self.assertEqual(sorted(seen), list(range(8)))


class _Recorder:
    def __init__(self) -> None:
        self.calls = {}

    def add(self, name, *values):
        self.calls.setdefault(name, []).append(values)


class _RecordingExtended(one_device_strategy.OneDeviceExtended):
    """Overrides what `HybridExtended` overrides, and records the calls."""

    def __init__(self, container, replicas, recorder) -> None:
        super().__init__(container, "/cpu:0")
        self._replicas = replicas
        self.recorder = recorder

    @property
    def _num_replicas_in_sync(self):
        return self._replicas

    def _in_multi_worker_mode(self):
        return True

    @property
    def should_checkpoint(self):
        return False

    def _call_for_each_replica(self, fn, args, kwargs):
        self.recorder.add("call_for_each_replica", fn)
        return super()._call_for_each_replica(fn, args, kwargs)

    def _create_variable(self, next_creator, **kwargs):
        self.recorder.add("create_variable", kwargs)
        return super()._create_variable(next_creator, **kwargs)

    def _batch_reduce_to(self, reduce_op, value_destination_pairs, options):
        self.recorder.add(
            "batch_reduce_to", [v for v, _ in value_destination_pairs]
        )
        return super()._batch_reduce_to(
            reduce_op, value_destination_pairs, options
        )

    def _reduce_to(self, reduce_op, value, destinations, options):
        self.recorder.add("reduce_to", value)
        return super()._reduce_to(reduce_op, value, destinations, options)

    def _update(self, var, fn, args, kwargs, group):
        self.recorder.add("update", var, args)
        return super()._update(var, fn, args, kwargs, group)

    def _gather_to_implementation(self, value, destinations, axis, options):
        self.recorder.add("gather_to", value, axis)
        return tf.concat([value, value], axis=axis)

    def _experimental_distribute_dataset(self, dataset, options):
        self.recorder.add("distribute_dataset", dataset)
        return dataset

    def _distribute_datasets_from_function(self, dataset_fn, options):
        self.recorder.add("datasets_from_function", dataset_fn)
        return dataset_fn(tf.distribute.InputContext(2, 1, 2))

    def _experimental_distribute_values_from_function(self, value_fn):
        self.recorder.add("values_from_function", value_fn)
        return value_fn(tf.distribute.experimental.ValueContext(1, 2))


class _RecordingStrategy(tf.distribute.Strategy):
    def __init__(self, replicas=1) -> None:
        self.recorder = _Recorder()
        super().__init__(_RecordingExtended(self, replicas, self.recorder))


class StrategyExtendedTest(TestCase):
    """`strategy/hybrid_extended.py`: a `OneDeviceExtended` subclass whose
    overrides Keras' `fit` and `tf.distribute`'s public API reach, and
    `distribute_lib.ReplicaContext`; `strategy/global_metrics.py`: the step
    function given to `run` unwraps to the model's `train_step`."""

    OVERRIDDEN = (
        "_call_for_each_replica",
        "_reduce_to",
        "_batch_reduce_to",
        "_gather_to_implementation",
        "_create_variable",
        "_update",
        "_experimental_distribute_dataset",
        "_distribute_datasets_from_function",
        "_experimental_distribute_values_from_function",
        "_num_replicas_in_sync",
        "_in_multi_worker_mode",
        "should_checkpoint",
        "should_save_summary",
    )

    def test_every_override_replaces_a_base_member(self):
        base = one_device_strategy.OneDeviceExtended
        for name in self.OVERRIDDEN:
            self.assertTrue(hasattr(base, name), name)
        self.assertIs(indexed_slices.IndexedSlices, tf.IndexedSlices)

    def test_fit_goes_through_the_overrides(self):
        strategy = _RecordingStrategy()
        with strategy.scope():
            model = _tiny_model()
            model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
        model.fit(*_tiny_data(), batch_size=4, epochs=1, verbose=0)
        calls = strategy.recorder.calls
        created = [kwargs for (kwargs,) in calls["create_variable"]]
        self.assertTrue(all("initial_value" in k for k in created))
        on_read = tf.VariableSynchronization.ON_READ
        self.assertTrue(
            any(k.get("synchronization") == on_read for k in created)
        )
        step = inspect.unwrap(calls["call_for_each_replica"][0][0])
        self.assertIs(step.__self__, model)
        self.assertEqual(step.__name__, "train_step")
        (grads,) = calls["batch_reduce_to"][0]
        self.assertEqual(len(grads), len(model.trainable_variables))
        self.assertIsInstance(grads[0], indexed_slices.IndexedSlices)
        updated = [var for var, _ in calls["update"]]
        for v in model.trainable_variables:
            self.assertTrue(any(u is v.value for u in updated), v.path)

    def test_keras_scales_the_loss_by_the_replica_count(self):
        for replicas, want in ((1, 0.8), (2, 0.9)):
            strategy = _RecordingStrategy(replicas)
            with strategy.scope():
                model = keras.Sequential(
                    [
                        keras.layers.Dense(
                            1, use_bias=False, kernel_initializer="ones"
                        )
                    ]
                )
                model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
            # d/dw (w x - 0)^2 = 2 at w = x = 1; Keras divides by replicas.
            model.fit(np.ones((1, 1)), np.zeros((1, 1)), epochs=1, verbose=0)
            self.assertAllClose(model.get_weights()[0], [[want]])

    def test_public_api_reaches_the_overrides(self):
        strategy = _RecordingStrategy(2)
        calls = strategy.recorder.calls
        self.assertEqual(strategy.num_replicas_in_sync, 2)
        self.assertFalse(strategy.extended.should_checkpoint)
        self.assertTrue(strategy.extended._in_multi_worker_mode())
        strategy.reduce("SUM", tf.constant(3.0), axis=None)
        self.assertIn("reduce_to", calls)
        gathered = strategy.gather(tf.constant([[1.0]]), axis=0)
        self.assertEqual(gathered.shape, (2, 1))
        dataset = tf.data.Dataset.range(4)
        self.assertIs(
            strategy.experimental_distribute_dataset(dataset), dataset
        )
        ids = strategy.distribute_datasets_from_function(
            lambda ctx: ctx.input_pipeline_id
        )
        self.assertEqual(ids, 1)
        value = strategy.experimental_distribute_values_from_function(
            lambda ctx: ctx.replica_id_in_sync_group
        )
        self.assertEqual(value, 1)

    def test_replica_context_reports_the_given_replica_id(self):
        class Context(distribute_lib.ReplicaContext):
            @property
            def devices(self):
                return ("/cpu:0",)

        strategy = _RecordingStrategy(2)
        with Context(strategy, replica_id_in_sync_group=1):
            replica = tf.distribute.get_replica_context()
            self.assertEqual(int(replica.replica_id_in_sync_group), 1)
            self.assertEqual(replica.devices, ("/cpu:0",))


class _RecordingVariable(resource_variable_ops.ResourceVariable):
    """Records the reads `ShardedTable`/`GlobalReadVariable` override."""

    def __init__(self, **kwargs) -> None:
        self.reads = []
        super().__init__(**kwargs)

    def sparse_read(self, indices, name=None):
        self.reads.append("sparse_read")
        return super().sparse_read(indices, name=name)

    def _dense_var_to_tensor(self, dtype=None, name=None, as_ref=False):
        self.reads.append("dense_var_to_tensor")
        return super()._dense_var_to_tensor(
            dtype=dtype, name=name, as_ref=as_ref
        )

    def value(self):
        self.reads.append("value")
        return super().value()

    def assign(self, value, use_locking=None, name=None, read_value=True):
        self.reads.append("assign")
        return super().assign(value, use_locking, name, read_value)

    def numpy(self):
        self.reads.append("numpy")
        return super().numpy()

    def __array__(self, dtype=None, copy=None):
        self.reads.append("__array__")
        return np.asarray(super().numpy(), dtype=dtype)


class ResourceVariableTest(TestCase):
    """`sparse/sharded_table.py`, `strategy/global_read_variable.py`:
    `ResourceVariable` subclasses made by a variable creator, whose
    `sparse_read`, `_dense_var_to_tensor`, `value`, `assign`, `numpy` and
    `__array__` are what Keras layers and TF ops reach;
    `sparse/table_factory.py`: `tf.gather` (so Keras' `ops.take`) calls
    `sparse_read` on the object it is given, the Keras variable, so an
    instance attribute set there routes the `Embedding` lookup."""

    def _embedding(self):
        def creator(next_creator, **kwargs):
            del next_creator
            return _RecordingVariable(**kwargs)

        with tf.variable_creator_scope(creator):
            layer = keras.layers.Embedding(8, 2)
            layer.build((None, 2))
        table = layer.embeddings.value
        self.assertIsInstance(table, _RecordingVariable)
        return layer, table

    def test_embedding_lookup_is_a_sparse_read(self):
        layer, table = self._embedding()
        layer.embeddings.sparse_read = table.sparse_read
        ids = tf.constant([[1, 2]])
        layer(ids)
        tf.function(layer)(ids)
        self.assertEqual(table.reads.count("sparse_read"), 2)

    def test_tensor_conversion_reaches_the_overrides(self):
        _, table = self._embedding()
        tf.convert_to_tensor(table)
        tf.function(lambda: table * 2.0)()
        self.assertIn("dense_var_to_tensor", table.reads)
        self.assertIn("value", table.reads)

    def test_set_and_get_weights_reach_assign_and_numpy(self):
        layer, table = self._embedding()
        layer.set_weights([np.ones((8, 2), "float32")])
        self.assertIn("assign", table.reads)
        self.assertAllClose(layer.get_weights()[0], np.ones((8, 2)))
        self.assertTrue({"numpy", "__array__"} & set(table.reads))


class CopyOnReadTest(TestCase):
    """`ConvertibleVariable.stored_tensor_shared`: a variable that was
    gathered from is in copy-on-read mode (each whole read a copy); the
    `DisableCopyOnRead` op turns that off until the next gather, and an
    update never changes a value read before it."""

    def _address(self, tensor) -> int:
        return np.asarray(tensor).ctypes.data

    def test_a_shared_read_is_not_a_copy_and_stays_as_read(self):
        variable = tf_compat.ConvertibleVariable(
            initial_value=np.zeros((64, 4), "float32")
        )
        ids = tf.constant([1, 5])
        variable.sparse_read(ids)  # copy-on-read from now on
        first, second = variable.stored_tensor(), variable.stored_tensor()
        self.assertNotEqual(self._address(first), self._address(second))
        shared = variable.stored_tensor_shared()
        self.assertEqual(
            self._address(shared),
            self._address(variable.stored_tensor_shared()),
        )
        variable.scatter_add(tf.IndexedSlices(tf.ones([2, 4]), ids))
        np.testing.assert_array_equal(np.asarray(shared), np.zeros((64, 4)))
        np.testing.assert_array_equal(
            variable.sparse_read(ids), np.ones((2, 4))
        )
        del shared
        # Copy-on-read again after the gather and scatter.
        first, second = variable.stored_tensor(), variable.stored_tensor()
        self.assertNotEqual(self._address(first), self._address(second))


class CompatHooksTest(TestCase):
    """`keras_hybrid/_compat/`: each named hook does what it says."""

    def test_variable_info_names_the_keras_variable(self):
        from keras_hybrid._compat import keras as keras_compat

        seen = []

        def creator(next_creator, **kwargs):
            seen.append(keras_compat.variable_info(kwargs["initial_value"]))
            return next_creator(**kwargs)

        layer = keras.layers.Embedding(6, 2, name="e")
        with tf.variable_creator_scope(creator):
            layer.build()
        variable, initializer = seen[0]
        self.assertIs(variable, layer.embeddings)
        self.assertEqual(tuple(initializer((2, 2)).shape), (2, 2))
        self.assertIsNone(keras_compat.variable_info(lambda: 1.0))

    def test_symbolic_scope_is_seen(self):
        from keras_hybrid._compat import keras as keras_compat

        flags = []

        class Probe(keras.layers.Layer):
            def call(self, x):
                flags.append(keras_compat.in_symbolic_scope())
                return x

        Probe()(keras.Input((2,)))
        Probe()(np.zeros((1, 2), "float32"))
        self.assertEqual(flags, [True, False])

    def test_variables_made_now_inside_a_stateless_scope(self):
        from keras.src.backend.common.stateless_scope import StatelessScope

        from keras_hybrid._compat import keras as keras_compat

        with StatelessScope():
            deferred = keras.Variable(keras.initializers.Zeros(), shape=(2,))
            with keras_compat.variables_made_now():
                made = keras.Variable(keras.initializers.Ones(), shape=(2,))
            self.assertIsNone(deferred._value)
            self.assertIsNotNone(made._value)
        np.testing.assert_array_equal(made.numpy(), [1.0, 1.0])
        np.testing.assert_array_equal(deferred.numpy(), [0.0, 0.0])

    def test_storage_swap_keeps_the_optimizer_key(self):
        from keras_hybrid._compat import keras as keras_compat
        from keras_hybrid._compat import tf as tf_compat

        variable = keras.Variable(np.zeros((3, 2), "float32"))
        optimizer = keras.optimizers.SGD(0.5, momentum=0.9)
        optimizer.build([variable])
        old = variable.value
        new = tf_compat.plain_variable(
            np.ones((3, 2), "float32"), "swapped", True, like=old
        )
        tf_compat.keep_variable_key(new, old)
        keras_compat.set_variable_storage(variable, new)
        self.assertIs(variable.value, new)
        optimizer.apply([np.ones((3, 2), "float32")], [variable])
        self.assertAllClose(variable.numpy(), np.full((3, 2), 0.5))

    def test_shape_query_is_told_apart_eagerly(self):
        from keras_hybrid._compat import tf as tf_compat

        seen = []
        variable = keras.Variable(np.zeros((3, 2), "float32"))
        original = type(variable.value)._dense_var_to_tensor

        def watch(self, *args, **kwargs):
            seen.append(tf_compat.in_shape_query())
            return original(self, *args, **kwargs)

        type(variable.value)._dense_var_to_tensor = watch
        try:
            tf.shape(variable)
            tf.reduce_sum(variable)
        finally:
            type(variable.value)._dense_var_to_tensor = original
        self.assertEqual(seen[:1], [True])
        self.assertIn(False, seen[1:])


class KerasVariableCreationTest(TestCase):
    """`_compat/keras.py` (`variable_info`): Keras' TF `Variable` hands
    `tf.Variable` a lambda whose closure holds the Keras variable (`self`)
    and its `initializer`; Keras' name-scope stack names the building
    layer as `caller`."""

    def test_creator_sees_the_keras_variable_and_layer(self):
        seen = []

        def creator(next_creator, **kwargs):
            init = kwargs["initial_value"]
            cells = dict(
                zip(
                    init.__code__.co_freevars,
                    (c.cell_contents for c in init.__closure__),
                    strict=True,
                )
            )
            stack = global_state.get_global_attribute(
                "name_scope_stack", default=[]
            )
            callers = [scope.caller for scope in stack]
            seen.append((cells["self"], cells["initializer"], callers))
            return next_creator(**kwargs)

        layer = keras.layers.Dense(3, kernel_initializer="ones", name="d")
        with tf.variable_creator_scope(creator):
            layer.build((None, 2))
        variable, initializer, callers = seen[0]
        self.assertIs(variable, layer.kernel)
        self.assertEqual(variable.path, "d/kernel")
        self.assertAllClose(
            initializer((2, 3), dtype="float32"), np.ones((2, 3))
        )
        self.assertIn(layer, callers)


class KerasOptimizerTest(TestCase):
    """`optimizers/hybrid_optimizer.py`: the accumulated update Keras'
    `BaseOptimizer._backend_apply_gradients` runs, through `_iterations`,
    `_accumulated_gradients`, `_get_variable_index`, `_clip_gradients`,
    `_apply_weight_decay` and `_backend_update_step`; `serialization_lib`."""

    def test_accumulation_members_exist_and_update(self):
        self.assertTrue(hasattr(BaseOptimizer, "_backend_apply_gradients"))
        var = keras.Variable(np.ones((2,), "float32"))
        opt = keras.optimizers.SGD(0.5, gradient_accumulation_steps=2)
        opt.build([var])
        acc = opt._accumulated_gradients[opt._get_variable_index(var)]
        self.assertEqual(tuple(acc.shape), (2,))
        grads = opt._clip_gradients([tf.constant([1.0, 2.0])])
        opt._apply_weight_decay([var])
        opt._backend_update_step(grads, [var], opt.learning_rate)
        self.assertAllClose(var.numpy(), [0.5, 0.0])
        opt._iterations.assign_add(1)
        self.assertEqual(int(opt._iterations.numpy()), 1)

    def test_serialization_round_trips_an_optimizer(self):
        config = serialization_lib.serialize_keras_object(
            keras.optimizers.Adam(0.25)
        )
        restored = serialization_lib.deserialize_keras_object(config)
        self.assertIsInstance(restored, keras.optimizers.Adam)
        self.assertAllClose(restored.learning_rate, 0.25)


class KerasSavingTest(TestCase):
    """`patches/chief_writes.py`: `model.save`, `save_weights` and
    `export` look up `saving_api.save_model`, `saving_api.save_weights`
    and `keras.src.export.export_saved_model` when called, and the stock
    callbacks write through their module's `file_utils`;
    `patches/h5_streaming.py`: `H5IOStore.__setitem__` receives each
    Keras variable, and its entry members."""

    def setUp(self) -> None:
        super().setUp()
        self.dir = tempfile.mkdtemp(prefix="compat_hooks_")
        self.model = _tiny_model()
        self.model.compile(optimizer="sgd", loss="mse")

    def test_save_and_export_look_their_writer_up_at_call_time(self):
        path = os.path.join(self.dir, "m")
        cases = (
            (saving_api, "save_model", self.model.save, path + ".keras"),
            (
                saving_api,
                "save_weights",
                self.model.save_weights,
                path + ".weights.h5",
            ),
            (keras_export, "export_saved_model", self.model.export, path),
        )
        for module, name, method, target in cases:
            with mock.patch.object(module, name) as writer:
                method(target)
            writer.assert_called_once()
            self.assertIs(writer.call_args.args[0], self.model)
            self.assertEqual(str(writer.call_args.args[1]), target)

    def test_callbacks_write_through_their_file_utils(self):
        members = ("File", "copy", "remove", "rmtree", "makedirs")
        for module in (backup_and_restore, model_checkpoint, csv_logger):
            self.assertIs(module.file_utils, file_utils)
        for name in (*members, "is_remote_path", "exists"):
            self.assertTrue(callable(getattr(file_utils, name)), name)
        backup = os.path.join(self.dir, "backup")
        callbacks = [
            keras.callbacks.CSVLogger(os.path.join(self.dir, "log.csv")),
            keras.callbacks.BackupAndRestore(backup, delete_checkpoint=False),
        ]
        proxy = mock.MagicMock(wraps=file_utils)
        with (
            mock.patch.object(csv_logger, "file_utils", proxy),
            mock.patch.object(backup_and_restore, "file_utils", proxy),
        ):
            self.model.fit(
                *_tiny_data(), epochs=1, verbose=0, callbacks=callbacks
            )
        modes = [c.args[1] for c in proxy.File.call_args_list]
        self.assertIn("w", modes)  # the CSV and the epoch record
        with open(os.path.join(backup, "training_metadata.json")) as f:
            self.assertEqual(json.load(f)["epoch"], 1)

    def test_h5_store_setitem_gets_each_keras_variable(self):
        original = saving_lib.H5IOStore.__setitem__
        seen = []

        def setitem(store, key, value):
            seen.append((store.mode, value))
            if not store._h5_entry_initialized:
                store._create_h5_group(store._h5_entry_path)
            store._h5_entry_group.create_dataset(key, data=np.asarray(value))

        with mock.patch.object(saving_lib.H5IOStore, "__setitem__", setitem):
            path = os.path.join(self.dir, "m.weights.h5")
            self.model.save_weights(path)
        self.assertIs(saving_lib.H5IOStore.__setitem__, original)
        self.assertEqual({mode for mode, _ in seen}, {"w"})
        # Layer weights arrive as Keras variables, the optimizer's may not.
        variables = [
            value
            for _, value in seen
            if isinstance(getattr(value, "value", None), tf.Variable)
        ]
        self.assertEqual(len(variables), len(self.model.weights))
        fresh = _tiny_model()
        fresh.load_weights(path)
        for got, want in zip(
            fresh.get_weights(), self.model.get_weights(), strict=True
        ):
            self.assertAllClose(got, want)


class KerasModelTest(TestCase):
    """`checkpoint/participants.py`, `checkpoint/model_variables.py`: a model
    keeps its strategy in `_distribute_strategy`;
    `callbacks/sharded_checkpoint.py`: `fit` starts from
    `model._initial_epoch` when a callback sets it (as `BackupAndRestore`
    does)."""

    def test_model_remembers_its_strategy(self):
        strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
        with strategy.scope():
            inside = _tiny_model()
        self.assertIs(inside._distribute_strategy, strategy)
        self.assertIsNone(_tiny_model()._distribute_strategy)

    def test_initial_epoch_set_on_train_begin_skips_epochs(self):
        class Resume(keras.callbacks.Callback):
            def on_train_begin(self, logs=None):
                self.model._initial_epoch = 2

        model = _tiny_model()
        model.compile(optimizer="sgd", loss="mse")
        history = model.fit(
            *_tiny_data(), epochs=3, verbose=0, callbacks=[Resume()]
        )
        self.assertEqual(history.epoch, [2])


class KerasConsoleTest(TestCase):
    """`strategy/quiet_ranks.py`: with interactive logging off, Keras
    prints through absl records whose file is `io_utils.py`."""

    def test_print_msg_logs_from_io_utils(self):
        records = []

        class Keep(logging.Handler):
            def emit(self, record):
                records.append(record)

        handler = Keep()
        logger = absl_logging.get_absl_logger()
        was_interactive = keras.config.is_interactive_logging_enabled()
        old_verbosity = absl_logging.get_verbosity()
        logger.addHandler(handler)
        absl_logging.set_verbosity(absl_logging.INFO)
        try:
            keras.config.disable_interactive_logging()
            io_utils.print_msg("compat probe")
        finally:
            logger.removeHandler(handler)
            absl_logging.set_verbosity(old_verbosity)
            if was_interactive:
                keras.config.enable_interactive_logging()
        probe = [r for r in records if "compat probe" in r.getMessage()]
        self.assertEqual([r.filename for r in probe], ["io_utils.py"])
        self.assertTrue(keras_compat.printed_by_keras(probe[0]))


class TableGradientMarkTest(TestCase):
    """`sparse/table_gradients.py`: the `dense_shape` tensor of a
    `custom_gradient`'s `IndexedSlices` is the very object TF's sum of two
    lookups' gradients carries (the registry routing a pushed gradient is
    keyed by it)."""

    def test_dense_shape_object_survives_aggregation(self):
        table = tf.Variable(tf.ones((4, 2)))
        shapes = []

        def lookup(ids):
            @tf.custom_gradient
            def read(ids):
                def grad(d_rows, variables):
                    del variables
                    shape = tf.constant([4, 2], tf.int64)
                    shapes.append(shape)
                    d_rows = tf.convert_to_tensor(d_rows)
                    return None, [tf.IndexedSlices(d_rows, ids, shape)]

                return tf.gather(table, ids), grad

            return read(ids)

        @tf.function
        def step():
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(lookup(tf.constant([0, 1])))
                loss += tf.reduce_sum(lookup(tf.constant([1, 3])))
            (grad,) = tape.gradient(loss, [table])
            self.assertIsInstance(grad, tf.IndexedSlices)
            self.assertEqual(len(shapes), 2)
            self.assertTrue(any(grad.dense_shape is s for s in shapes))
            return grad.indices

        self.assertEqual(sorted(step().numpy().tolist()), [0, 1, 1, 3])


class CompatFunctionsTest(TestCase):
    """The `_compat` functions and base classes themselves, as the package
    calls them (the classes above check the TF/Keras members under them)."""

    def test_tape_records_in_a_tape_eagerly_and_traced(self):
        seen = []

        @tf.function
        def step():
            seen.append(tf_compat.tape_records())
            with tf.GradientTape():
                seen.append(tf_compat.tape_records())
            return tf.constant(0)

        step()
        self.assertFalse(tf_compat.tape_records())
        with tf.GradientTape():
            self.assertTrue(tf_compat.tape_records())
        self.assertEqual(seen, [False, True])

    def test_dataset_shards_through_maps_batches_and_interleaves(self):
        files = tf.data.Dataset.range(6).shard(3, 2)
        data = files.interleave(lambda f: tf.data.Dataset.range(2))
        data = data.map(lambda x: x * 2).batch(2).prefetch(1)
        self.assertEqual(tf_compat.dataset_shards(data), [(3, 2)])
        plain = tf.data.Dataset.range(4).batch(2)
        self.assertEqual(tf_compat.dataset_shards(plain), [])
        zipped = tf.data.Dataset.zip((data, plain.shard(2, 0)))
        self.assertEqual(
            sorted(tf_compat.dataset_shards(zipped)), [(2, 0), (3, 2)]
        )

    def test_in_while_loop_in_a_loop_and_a_branch_inside_it(self):
        seen = []

        def body(i):
            seen.append(("body", tf_compat.in_while_loop()))

            def branch():
                seen.append(("branch", tf_compat.in_while_loop()))
                return i + 1

            return (tf.cond(i > 0, branch, lambda: i + 2),)

        @tf.function
        def step():
            seen.append(("outside", tf_compat.in_while_loop()))
            return tf.while_loop(lambda i: i < 3, body, [tf.constant(0)])

        step()
        self.assertFalse(tf_compat.in_while_loop())
        self.assertIn(("outside", False), seen)
        self.assertIn(("body", True), seen)
        self.assertIn(("branch", True), seen)

    def test_tape_watches_what_the_open_tape_recorded(self):
        v = tf.Variable(1.0)
        seen = []

        @tf.function
        def step():
            before = v * 2.0  # no tape yet
            with tf.GradientTape():
                inside = v * 3.0
                seen.append(tf_compat.tape_watches([before]))
                seen.append(tf_compat.tape_watches([inside]))
            with tf.GradientTape():
                seen.append(tf_compat.tape_watches([inside]))
            return before + inside

        step()
        self.assertEqual(seen, [False, True, False])

    def test_tf_lookups_call_embedding_lookup_by_name(self):
        # `patches/tf_lookups.py` replaces the module attribute: each of
        # these must look it up when it runs.
        module = tf_compat.embedding_lookup_module()
        original = module.embedding_lookup
        calls = []

        def spy(params, ids, *args, **kwargs):
            calls.append(params)
            return original(params, ids, *args, **kwargs)

        table = tf.Variable(tf.ones([10, 2]))
        ids = tf.constant([[1, 2]], tf.int64)
        labels = tf.constant([[3]], tf.int64)
        sampled = (tf.constant([4, 5], tf.int64), tf.ones([1, 1]), tf.ones([2]))
        uses = {
            "embedding_lookup": lambda: tf.nn.embedding_lookup(table, ids),
            "embedding_lookup_sparse": lambda: tf.nn.embedding_lookup_sparse(
                table, tf.sparse.from_dense(ids), None
            ),
        }
        for loss in (tf.nn.sampled_softmax_loss, tf.nn.nce_loss):
            uses[loss.__name__] = functools.partial(
                loss,
                table,
                tf.zeros([10]),
                labels,
                tf.ones([1, 2]),
                2,
                10,
                sampled_values=sampled,
            )
        for name, use in uses.items():
            calls.clear()
            with mock.patch.object(module, "embedding_lookup", spy):
                use()
            self.assertTrue(
                any(c is table or c[0] is table for c in calls), name
            )

    def test_collectives_run_in_a_group_of_one(self):
        kwargs = dict(group_size=1, group_key=_GROUP + 1, timeout=30)
        x = tf.constant([[1.0, 2.0]])
        outs = [
            tf_compat.all_reduce(
                x, instance_key=1, merge_op="Add", final_op="Id", **kwargs
            ),
            tf_compat.all_gather(x, instance_key=2, **kwargs),
            tf_compat.all_to_all(x, instance_key=3, **kwargs),
            tf_compat.broadcast_send(x, instance_key=4, **kwargs),
        ]
        for out in outs:
            self.assertAllClose(out, x)

    def test_reset_collectives_recovers_an_aborted_process(self):
        # In a child process: the reset replaces this process's context.
        script = _RESET_SCRIPT
        out = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        )
        self.assertEqual(out.returncode, 0, out.stderr[-3000:])
        result = json.loads(out.stdout.strip().splitlines()[-1])
        self.assertTrue(result["aborted_fails"])
        self.assertEqual(result["after_reset"], [3.0, 3.0])
        # assign_add works; assign did nothing (see _RESET_SCRIPT).
        self.assertEqual(result["old_variable"], [2.0, 3.0])
        self.assertEqual(result["seed"], 7)
        # A StringLookup's table, made again: a dataset built before the
        # reset and the layer both read it.
        self.assertEqual(result["lookups"], [[3, 1, 0], [3, 1, 0], [2]])

    def test_a_task_other_than_0_leads_and_a_new_context_changes_it(self):
        # Tasks 1 and 2 of a 3-task cluster whose task 0 never runs (an
        # elastic job that lost it): TF's collective leader resolves
        # every group, so each context must name a running one.
        from keras_hybrid.launch.topology import free_ports

        ports = [str(p) for p in free_ports(6)]
        first, second = ",".join(ports[:3]), ",".join(ports[3:])
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _LEADER_SCRIPT, str(t), first, second],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
            )
            for t in (1, 2)
        ]
        for proc in procs:
            out, err = proc.communicate(timeout=300)
            self.assertEqual(proc.returncode, 0, err[-3000:])
            result = json.loads(out.strip().splitlines()[-1])
            self.assertEqual(result, {"before": 3.0, "after": 3.0})

    def test_run_independently_keeps_an_unused_send(self):
        kwargs = dict(group_size=1, group_key=_GROUP + 1, timeout=0)
        ops = {}

        @tf.function
        def step(x):
            # TF's automatic control dependencies leave an unused
            # broadcast send out of the function's control outputs ...
            ops["left"] = tf_compat.broadcast_send(
                x, instance_key=5, **kwargs
            ).op
            ops["kept"] = tf_compat.broadcast_send(
                x, instance_key=6, **kwargs
            ).op
            ops["marked"] = tf_compat.run_independently(ops["kept"])
            return x + 1

        graph = step.get_concrete_function(
            tf.TensorSpec([1, 2], tf.float32)
        ).graph
        self.assertNotIn(ops["left"], graph.control_outputs)
        # ... unless it is marked to run independently.
        self.assertTrue(ops["marked"])
        self.assertIn(ops["kept"], graph.control_outputs)
        with tf.Graph().as_default():
            self.assertFalse(tf_compat.run_independently(tf.constant(1.0).op))

    def test_custom_gradients_owned_by_their_graph(self):
        """`sparse/table_gradients.py` and the other custom gradients: in a
        graph, `tf.custom_gradient` leaves its gradient function in
        `ops._gradient_registry` (the key the call's IdentityN names); the
        hook moves it onto the graph, and the name leaves with the graph."""
        from tensorflow.python.framework import ops

        table = tf.Variable(tf.ones([5, 2]))
        registry = ops._gradient_registry._registry

        @tf.custom_gradient
        def read(ids):
            rows = table.sparse_read(ids)

            def grad(d_rows, variables):
                del variables
                return None, [tf.IndexedSlices(3.0 * d_rows, ids, [5, 2])]

            return rows, grad

        def step(ids):
            with tf.GradientTape() as tape:
                rows = tf_compat.custom_gradient_owned_by_graph(read, ids)
                loss = tf.reduce_sum(rows)
            by_tape = tape.gradient(loss, table)
            # The registry's path (graph gradients through the IdentityN).
            by_graph = tf.gradients(loss, [table])[0]
            return tf.convert_to_tensor(by_tape), tf.convert_to_tensor(by_graph)

        before = len(registry)
        traced = tf.function(step)
        by_tape, by_graph = traced(tf.constant([1, 3], tf.int64))
        want = np.zeros([5, 2])
        want[[1, 3]] = 3.0
        self.assertAllClose(by_tape, want)
        self.assertAllClose(by_graph, want)
        self.assertEqual(len(registry), before + 1)
        graph = traced.get_concrete_function(
            tf.TensorSpec([None], tf.int64)
        ).graph
        self.assertEqual(len(graph.get_collection(tf_compat._OWNED)), 1)
        del traced, graph
        gc.collect()
        self.assertEqual(len(registry), before)
        # Eagerly nothing is registered.
        rows = tf_compat.custom_gradient_owned_by_graph(
            read, tf.constant([1, 3], tf.int64)
        )
        self.assertAllClose(rows, np.ones([2, 2]))
        self.assertEqual(len(registry), before)

    def test_convertible_variable_sends_whole_reads_to_to_tensor(self):
        class Doubled(tf_compat.ConvertibleVariable):
            def to_tensor(self, dtype=None, name=None, as_ref=False):
                if as_ref:
                    return self.stored_tensor(dtype, name, as_ref)
                return 2 * self.stored_tensor(dtype=dtype, name=name)

        var = Doubled(initial_value=[1.0, 3.0])
        self.assertAllClose(tf.convert_to_tensor(var), [2.0, 6.0])
        self.assertAllClose(tf.add(var, 0.0), [2.0, 6.0])
        traced = tf.function(lambda: tf.convert_to_tensor(var))
        self.assertAllClose(traced(), [2.0, 6.0])
        var.assign([5.0, 5.0])
        self.assertAllClose(var.stored_tensor(), [5.0, 5.0])

    def test_convertible_variable_reads_take_read_shape(self):
        """`sparse/sharded_table.py` (resizes, `sparse/resharding.py`): a
        variable made with an unknown first dimension takes another row
        count by `assign`; its reads, eager and traced, have `read_shape`."""
        rows = [3]

        class Resizable(tf_compat.ConvertibleVariable):
            def read_shape(self):
                return (rows[0], 2)

        var = Resizable(tf.zeros([3, 2]), shape=tf.TensorShape([None, 2]))
        rows[0] = 5
        var.assign(tf.ones([5, 2]), read_value=False)
        self.assertEqual(var.read_value().shape, (5, 2))
        traced = tf.function(lambda: var.value()).get_concrete_function()
        self.assertEqual(traced.output_shapes, tf.TensorShape([5, 2]))
        whole = tf.function(lambda: tf.convert_to_tensor(var))
        self.assertEqual(whole.get_concrete_function().output_shapes, (5, 2))
        self.assertAllClose(var.sparse_read([4]), [[1.0, 1.0]])

    def test_convertible_variable_checkpoints_through_named_methods(self):
        """`sparse/sharded_table.py`: a `tf.train.Checkpoint` writes what
        `checkpoint_value` returns when it is written, and gives the tensor
        it reads back to `restore_value`, also for a restore deferred to
        the variable's creation; without `checkpoint_value` it keeps
        ResourceVariable's own."""
        restored = []

        class Whole(tf_compat.ConvertibleVariable):
            @property
            def checkpoint_value(self):
                return lambda: tf.convert_to_tensor(self) * 2.0

            def restore_value(self, value):
                restored.append(value.numpy())
                return self.assign(value, read_value=False)

        folder = tempfile.mkdtemp()
        path = tf.train.Checkpoint(v=Whole([1.0, 2.0])).write(
            os.path.join(folder, "ckpt")
        )
        later = tf.train.Checkpoint()
        later.restore(path)
        later.v = Whole([0.0, 0.0])  # created after the restore
        self.assertAllClose(restored[-1], [2.0, 4.0])
        self.assertAllClose(later.v, [2.0, 4.0])
        plain = tf_compat.ConvertibleVariable([0.0, 0.0])
        tf.train.Checkpoint(v=plain).restore(path)
        self.assertAllClose(plain, [2.0, 4.0])

    def test_one_process_extended_overrides_only_real_hooks(self):
        hooks = [
            name
            for name in OneProcessExtended.__dict__
            if name.startswith("_") and not name.startswith("__")
        ]
        self.assertGreaterEqual(len(hooks), 11)
        for name in hooks:
            self.assertTrue(
                hasattr(one_device_strategy.OneDeviceExtended, name), name
            )
        strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
        self.assertTrue(hasattr(strategy.extended, "_device"))
        self.assertIs(strategy.extended._container_strategy(), strategy)

    def test_shard_files_splits_each_global_batch(self):
        dataset = tf.data.Dataset.range(8).batch(4)
        seen = []
        for rank in range(2):
            local = tf_compat.shard_files(dataset, rank, 2)
            batches = [b.numpy().tolist() for b in local]
            self.assertEqual([len(b) for b in batches], [2, 2])
            seen += [i for b in batches for i in b]
        self.assertEqual(sorted(seen), list(range(8)))

    def test_every_patch_site_is_found_and_restored(self):
        for site in keras_compat.SITES:
            before = keras_compat.current(site)
            self.assertIsNotNone(before, site)
            marker = object()
            self.assertIs(keras_compat.replace(site, marker), before)
            self.assertIs(keras_compat.current(site), marker)
            keras_compat.replace(site, before)
            self.assertIs(keras_compat.current(site), before)
        self.assertIsInstance(
            keras_compat.current("TensorBoard.summary"), property
        )
        with self.assertRaisesRegex(ValueError, "Unknown Keras patch site"):
            keras_compat.current("nope")

    def test_symbolic_build_takes_the_epoch_datasets_spec(self):
        # patches/build_from_spec.py: Keras' TF trainer builds a model under a
        # strategy from a drawn batch; given the dataset's element spec it
        # builds all the same, and the epoch iterator holds that dataset.
        from keras.src.backend.tensorflow.trainer import TFEpochIterator

        strategy = one_device_strategy.OneDeviceStrategy("/cpu:0")
        with strategy.scope():
            model = keras.Sequential([keras.layers.Dense(2)])
            model.compile(optimizer="sgd", loss="mse")
        ones = np.ones((8, 3), "float32")
        data = tf.data.Dataset.from_tensor_slices((ones, ones[:, :2]))
        epochs = TFEpochIterator(distribute_strategy=strategy, x=data.batch(4))
        spec = keras_compat.epoch_dataset_spec(epochs)
        self.assertEqual(spec[0].shape.as_list(), [None, 3])
        build = keras_compat.current("TensorFlowTrainer._maybe_symbolic_build")
        self.assertEqual(
            list(inspect.signature(build).parameters),
            ["self", "iterator", "data_batch"],
        )
        build(model, data_batch=spec)
        self.assertTrue(model.built)
        self.assertTrue(model.optimizer.built)

    def test_a_failed_call_leaves_the_layers_it_only_marked_built(self):
        # patches/build_from_spec.py, strategy/placement_trace.py: a layer
        # that a failed early call built without creating state takes
        # state again afterwards (keras-rs' `update_candidates`); one that
        # created a variable stays built.
        class Late(keras.layers.Layer):
            def build(self, input_shape):
                pass

            def call(self, x):
                raise ValueError("not yet")

        class Both(keras.Model):
            def __init__(self):
                super().__init__()
                self.dense = keras.layers.Dense(2)
                self.late = Late()

            def call(self, x):
                return self.late(self.dense(x))

        model = Both()
        with self.assertRaisesRegex(ValueError, "not yet"):
            with keras_compat.unbuilt_if_failed(model):
                model(np.ones((1, 3), "float32"))
        self.assertFalse(model.late.built)
        model.late.v = keras.Variable(np.ones(2), trainable=False)
        self.assertTrue(model.dense.built)
        self.assertEqual(len(model.dense.weights), 2)

    def test_h5_dataset_writes_into_the_store_entry(self):
        model = _tiny_model()
        original = keras_compat.current("H5IOStore.__setitem__")

        def setitem(store, key, value):
            keras_compat.h5_dataset(store, key, value.shape, "float32")[...] = (
                np.asarray(value)
            )

        keras_compat.replace("H5IOStore.__setitem__", setitem)
        try:
            path = os.path.join(tempfile.mkdtemp(), "m.weights.h5")
            model.save_weights(path)
        finally:
            keras_compat.replace("H5IOStore.__setitem__", original)
        fresh = _tiny_model()
        fresh.load_weights(path)
        for got, want in zip(
            fresh.get_weights(), model.get_weights(), strict=True
        ):
            self.assertAllClose(got, want)

    def test_accumulated_update_functions(self):
        var = keras.Variable(np.ones((2,), "float32"))
        opt = keras.optimizers.SGD(0.5, gradient_accumulation_steps=2)
        opt.build([var])
        (acc,) = keras_compat.accumulators(opt, [var])
        self.assertEqual(tuple(acc.shape), (2,))
        self.assertIn(var.path, [v.path for v in opt._trainable_variables])
        self.assertEqual(
            [v.path for v in keras_compat.last_trainable_variables(opt)],
            [var.path],
        )
        self.assertIsInstance(keras_compat.own_variables(opt), list)
        keras_compat.apply_accumulated_update(
            opt, [tf.constant([1.0, 2.0])], [var]
        )
        self.assertAllClose(var.numpy(), [0.5, 0.0])
        iterations = keras_compat.iterations_variable(opt)
        iterations.assign_add(1)
        self.assertEqual(int(iterations.numpy()), 1)

    def test_set_initial_epoch_on_train_begin_skips_epochs(self):
        class Resume(keras.callbacks.Callback):
            def on_train_begin(self, logs=None):
                keras_compat.set_initial_epoch(self.model, 2)

        model = _tiny_model()
        model.compile(optimizer="sgd", loss="mse")
        history = model.fit(
            *_tiny_data(), epochs=3, verbose=0, callbacks=[Resume()]
        )
        self.assertEqual(history.epoch, [2])

    def test_model_distribute_strategy_is_public(self):
        strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
        with strategy.scope():
            inside = _tiny_model()
        self.assertIs(inside.distribute_strategy, strategy)


class ElasticKerasHooksTest(TestCase):
    """`_compat.keras` hooks of `patches.elastic_training` and
    `elastic.resize`."""

    def _model(self, **compile_kwargs):
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse", **compile_kwargs)
        return model

    def test_loss_scaling_is_looked_up_at_call_time(self):
        from keras_hybrid._compat import keras as keras_compat

        scale = keras_compat.current("scale_loss_for_distribution")
        unscale = keras_compat.current("unscale_loss_for_distribution")
        self.assertEqual(scale.__name__, "scale_loss_for_distribution")
        self.assertEqual(unscale.__name__, "unscale_loss_for_distribution")
        loss = keras.losses.MeanSquaredError()
        ones = np.ones((2, 1), "float32")
        self.assertAllClose(loss(ones, 0 * ones), 1.0)
        keras_compat.replace("scale_loss_for_distribution", lambda v: v * 0.25)
        try:
            self.assertAllClose(loss(ones, 0 * ones), 0.25)
        finally:
            keras_compat.replace("scale_loss_for_distribution", scale)
        self.assertAllClose(loss(ones, 0 * ones), 1.0)

    def test_a_loss_reduces_through_the_module_function(self):
        # `patches.loss_means` corrects what `reduce_weighted_values`
        # returns by the count `loss_divisor` says it divided by.
        from keras_hybrid._compat import keras as keras_compat

        reduce = keras_compat.current("reduce_weighted_values")
        self.assertEqual(reduce.__name__, "reduce_weighted_values")
        loss = keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, ignore_class=0
        )
        y = np.array([[0, 1, 2], [0, 0, 1]])
        logits = np.zeros((2, 3, 3), "float32")
        keras_compat.replace("reduce_weighted_values", lambda *a, **k: 7.0)
        try:
            self.assertAllClose(loss(y, logits), 7.0)
        finally:
            keras_compat.replace("reduce_weighted_values", reduce)
        self.assertAllClose(loss(y, logits), np.log(3.0))
        values = np.ones((2, 3), "float32")
        mask = y != 0
        divisor = keras_compat.loss_divisor(
            values, None, mask, "sum_over_batch_size", "float32"
        )
        self.assertAllClose(divisor, 3.0)
        self.assertIsNone(
            keras_compat.loss_divisor(
                values, None, None, "sum_over_batch_size", "float32"
            )
        )
        weights = np.array([0.5, 2.0], "float32")
        divisor = keras_compat.loss_divisor(
            values, weights, None, "mean_with_sample_weight", "float32"
        )
        self.assertAllClose(divisor, 2.5)
        self.assertIsNone(
            keras_compat.loss_divisor(values, weights, mask, "sum", "float32")
        )

    def test_train_step_function_can_be_traced_ahead(self):
        from keras_hybrid._compat import keras as keras_compat

        model = self._model()
        model.make_train_function()
        step = keras_compat.traced_step_of(model.train_function)
        self.assertTrue(hasattr(step, "get_concrete_function"))
        data = tf.data.Dataset.from_tensors(
            (tf.ones((4, 2)), tf.ones((4, 1)))
        ).repeat()
        step.get_concrete_function(iter(data))
        self.assertEqual(step.experimental_get_tracing_count(), 1)
        model.train_function(iter(data))
        self.assertEqual(step.experimental_get_tracing_count(), 1)
        eager = self._model(run_eagerly=True)
        eager.make_train_function()
        self.assertIsNone(keras_compat.traced_step_of(eager.train_function))

    def test_validation_gate_shadows_should_eval(self):
        from keras_hybrid._compat import keras as keras_compat

        model = self._model()
        self.assertTrue(model._should_eval(0, 1))
        keras_compat.set_validation_gate(model, lambda: False)
        self.assertFalse(model._should_eval(0, 1))
        keras_compat.set_validation_gate(model, None)
        self.assertTrue(model._should_eval(0, 1))

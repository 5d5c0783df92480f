"""Private TensorFlow hooks (see the package docstring for the list)."""

import tensorflow as tf


def keep_variable_key(new: tf.Variable, old: tf.Variable) -> None:
    """Gives `new` the key `old` has in Keras optimizers' state maps.

    Keras' TF optimizer keys per-variable state by `_unique_id`; a variable
    whose storage is replaced keeps its slots this way.
    """
    new._unique_id = old._unique_id


def plain_variable(
    initial_value, name: str, trainable: bool, like: tf.Variable | None = None
) -> tf.Variable:
    """A `ResourceVariable` made without the variable-creator stack (so the
    strategy does not broadcast or partition it).

    `like` is the variable it replaces: the new one belongs to the same
    strategy (`_distribute_strategy`), as a variable the strategy created
    would, so that `colocate_vars_with` accepts it (Keras' optimizer calls
    that for each slot it builds later).
    """
    from tensorflow.python.ops import resource_variable_ops

    return resource_variable_ops.ResourceVariable(
        initial_value=initial_value,
        name=name,
        trainable=trainable,
        distribute_strategy=getattr(like, "_distribute_strategy", None),
    )


_SHAPE_FUNCTIONS = ("shape_internal", "shape_n")


def in_shape_query(depth: int = 16) -> bool:
    """Whether the current eager tensor conversion serves `tf.shape`.

    Eagerly, `tf.shape` of a Keras variable converts the whole value (its
    `__tf_tensor__`), where a graph would only read the static shape.
    Looks `depth` frames up the Python stack for `array_ops.shape_internal`.
    """
    import sys

    frame = sys._getframe(1)
    for _ in range(depth):
        if frame is None:
            return False
        code = frame.f_code
        if code.co_name in _SHAPE_FUNCTIONS and "array_ops" in code.co_filename:
            return True
        frame = frame.f_back
    return False


def tape_records() -> bool:
    """Whether a gradient tape is recording (in a traced step too: the
    forward pass of a train step runs under its tape)."""
    from tensorflow.python.eager import record

    return record.could_possibly_record()


def tape_watches(tensors) -> bool:
    """Whether an active gradient tape records `tensors`' gradients: made
    from what it watches while it recorded."""
    from tensorflow.python.eager import record

    return record.should_record_backprop(tensors)


def in_while_loop() -> bool:
    """Whether ops are being traced into the body or condition of a
    `tf.while_loop` (a Keras RNN's loop over time steps), directly or
    inside a branch nested in one."""
    from tensorflow.python.ops import control_flow_util_v2

    if tf.executing_eagerly():
        return False
    graph = tf.compat.v1.get_default_graph()
    while graph is not None:
        if control_flow_util_v2.in_while_loop_defun(graph):
            return True
        if not isinstance(graph, control_flow_util_v2.CondBranchFuncGraph):
            return False
        graph = graph.outer_graph
    return False


# -- TF's embedding lookups (patches/tf_lookups.py)


def embedding_lookup_module():
    """`embedding_ops`, whose module-level `embedding_lookup` TF's lookups
    call by name when they run: `tf.nn.embedding_lookup` (v2),
    `embedding_lookup_sparse`, and `nn_impl`'s sampled losses
    (`sampled_softmax_loss`, `nce_loss`)."""
    from tensorflow.python.ops import embedding_ops

    return embedding_ops


# -- variables (sparse/sharded_table.py, strategy/global_read_variable.py)


def _resource_variable_class():
    from tensorflow.python.ops import resource_variable_ops

    return resource_variable_ops.ResourceVariable


def disable_copy_on_read(variable):
    """Turns TensorFlow's copy-on-read mode off for `variable` (a resource
    `tf.Variable`): a whole read then shares its memory instead of
    copying it. A gather or a scatter turns the mode on again, without a
    copy once no read of the value is held; an update while a read is
    held copies the variable first. The public `DisableCopyOnRead` op
    (TF 2.12 and later); returns it."""
    return tf.raw_ops.DisableCopyOnRead(resource=variable.handle)


class ConvertibleVariable(_resource_variable_class()):
    """A `ResourceVariable` whose tensor conversion is a named method.

    `tf.convert_to_tensor(variable)` and every op that reads the variable
    whole go through the private `_dense_var_to_tensor`; subclasses
    override `to_tensor` instead, and reach the stored value with
    `stored_tensor`.
    """

    def _dense_var_to_tensor(self, dtype=None, name=None, as_ref=False):
        return self.to_tensor(dtype=dtype, name=name, as_ref=as_ref)

    def to_tensor(self, dtype=None, name=None, as_ref=False):
        """What a whole read of this variable returns."""
        return self.stored_tensor(dtype=dtype, name=name, as_ref=as_ref)

    def stored_tensor(self, dtype=None, name=None, as_ref=False):
        """The value this process stores (ResourceVariable's conversion)."""
        return super()._dense_var_to_tensor(
            dtype=dtype, name=name, as_ref=as_ref
        )

    def stored_tensor_shared(self):
        """The value this process stores, in the variable's own memory.

        In copy-on-read mode, after a gather or a scatter, every whole
        read copies the variable (19 MB for a commit's shard: about
        1 ms). Eagerly, this turns the mode off (`disable_copy_on_read`)
        and reads: no copy. Drop the result before the variable is
        updated; an update while it is held copies the variable first,
        so the result never changes.
        """
        if tf.executing_eagerly():
            disable_copy_on_read(self)
        return self.stored_tensor()

    def _read_variable_op(self, *args, **kwargs):
        rows = self.rows_read()
        if rows is not None:
            return self.read_rows(*rows)
        value = super()._read_variable_op(*args, **kwargs)
        shape = self.read_shape()
        if shape is not None:
            value.set_shape(shape)
        return value

    def rows_read(self):
        """The rows `(start, stop)` (int64 scalar tensors) that every
        read returns now, or None for all of them. Reads are
        `tf.convert_to_tensor`, `value()`, `read_value()` and the
        operators; each such read returns `read_rows(start, stop)`."""
        return None

    def read_rows(self, start, stop):
        """Rows `[start, stop)`, without copying them: copy-on-read mode
        off (`disable_copy_on_read`), a whole read, which then shares the
        variable's memory, and a leading-dimension slice, which shares it
        too. In copy-on-read mode (after any gather or scatter) a whole
        read would copy every row, and a gather copies the rows read."""
        with tf.control_dependencies([disable_copy_on_read(self)]):
            whole = tf.raw_ops.ReadVariableOp(
                resource=self.handle, dtype=self.dtype
            )
        return whole[start:stop]

    def _serialize_to_tensors(self):
        value = self.checkpoint_value
        if value is None:
            return super()._serialize_to_tensors()
        from tensorflow.python.trackable import base as trackable

        # Called as the checkpoint is written, before TensorFlow's save
        # function (traced) writes what it returns.
        return {trackable.VARIABLE_VALUE_KEY: value()}

    def _restore_from_tensors(self, restored_tensors):
        if self.checkpoint_value is None:
            return super()._restore_from_tensors(restored_tensors)
        from tensorflow.python.trackable import base as trackable

        return self.restore_value(
            restored_tensors[trackable.VARIABLE_VALUE_KEY]
        )

    # What a TensorFlow checkpoint (`tf.train.Checkpoint`) writes and reads
    # for this variable: None keeps ResourceVariable's (the stored value);
    # else a function returning the tensor to write, called when the
    # checkpoint is written (`_serialize_to_tensors`), and `restore_value`
    # is given the tensor read back (`_restore_from_tensors`).
    checkpoint_value = None

    def restore_value(self, value):
        """Takes `value`, as `checkpoint_value` wrote it, back."""
        raise NotImplementedError

    def read_shape(self):
        """Static shape every read of the stored value gets, or None.

        For a variable made with an unknown dimension (so that `assign`
        can change its shape): its reads, eager or traced, still have the
        shape it holds now. ResourceVariable reads go through the private
        `_read_variable_op`.
        """
        return None


# -- collectives (comm/tf_communicator.py)
# The V2 ops take group size, group key and instance key as tensors, which
# lets one traced op choose its key per step.


def _collective_ops():
    from tensorflow.python.ops import collective_ops

    return collective_ops


def all_reduce(tensor, **kwargs):
    """`CollectiveReduceV2` (keywords of `collective_ops.all_reduce_v2`)."""
    return _collective_ops().all_reduce_v2(tensor, **kwargs)


def all_gather(tensor, **kwargs):
    """`CollectiveGatherV2`: concatenation along axis 0 in rank order."""
    return _collective_ops().all_gather_v2(tensor, **kwargs)


def all_to_all(tensor, **kwargs):
    """`CollectiveAllToAllV2`: slice j of axis 0 goes to member j."""
    return _collective_ops().all_to_all_v2(tensor, **kwargs)


def broadcast_send(tensor, **kwargs):
    """`CollectiveBcastSendV2` from this member."""
    return _collective_ops().broadcast_send_v2(tensor, **kwargs)


def broadcast_recv(shape, **kwargs):
    """`CollectiveBcastRecvV2` of a tensor of `shape` and `dtype`."""
    return _collective_ops().broadcast_recv_v2(shape, **kwargs)


def run_independently(op) -> bool:
    """Makes the side-effect `op` run whenever the `tf.function` being
    traced runs, though no output depends on it (a collective send).

    TF's automatic control dependencies add stateful ops to a function's
    control outputs, but leave out the asynchronous collectives
    (`auto_control_deps.ASYNC_STATEFUL_OPS`, which has the broadcast send);
    `run_independently` adds one. Returns False (and does nothing) outside
    a graph that has no automatic control dependencies.
    """
    manager = getattr(op.graph, "experimental_acd_manager", None)
    if manager is None:
        return False
    manager.run_independently(op)
    return True


# -- cluster (strategy/cluster.py, comm/peer_watchdog.py)


def eager_context_started() -> bool:
    """Whether this process's eager context has started (an op, tensor,
    variable or dataset was made): collectives can then no longer be
    enabled in it."""
    from tensorflow.python.eager import context

    return bool(context.context()._initialized)


def enable_collectives(
    cluster_spec: tf.train.ClusterSpec,
    job: str,
    task: int,
    protocol: str,
    leader: int = 0,
) -> None:
    """Starts this task's gRPC server and enables collective ops in the
    eager context, as `MultiWorkerMirroredStrategy` does: task `leader` of
    `job` resolves every collective group (it need not be a member of
    one, but must run), and this task talks only to itself and the tasks
    it runs collectives with (device filters)."""
    from tensorflow.core.protobuf import tensorflow_server_pb2
    from tensorflow.python.eager import context

    leader_device = f"/job:{job}/replica:0/task:{leader}"
    ctx = context.context()
    ctx.configure_collective_ops(
        collective_leader=leader_device,
        device_filters=(f"/job:{job}/task:{task}",),
    )
    config = ctx.config
    config.experimental.collective_group_leader = leader_device
    server_def = tensorflow_server_pb2.ServerDef(
        cluster=cluster_spec.as_cluster_def(),
        default_session_config=config,
        job_name=job,
        task_index=task,
        protocol=protocol,
    )
    ctx.enable_collective_ops(server_def)
    ctx.ensure_initialized()


def reset_collectives(
    cluster_spec: tf.train.ClusterSpec,
    job: str,
    task: int,
    protocol: str,
    leader: int = 0,
) -> None:
    """Replaces this process's eager context by a new one that serves
    collectives on `cluster_spec` (an elastic job's survivors, on new
    ports), with task `leader` resolving the groups.

    After a peer died, TF 2.21's collective executor fails every later
    collective, in any group; only a new context recovers (probe
    `tf_group_failure_reset.py`). The leader of a context cannot change,
    but a new context may name another one: the survivors of a lost
    leader reset with one of them leading. Variables made before keep
    working; every `tf.function` must be traced again. The global seed
    is kept, and lookup tables with an initializer are made again
    (`_revive_lookup_tables`).
    """
    from tensorflow.python.eager import context

    seed, _ = tf.compat.v1.random.get_seed(None)
    context._reset_context()
    if seed is not None:
        tf.random.set_seed(seed)
    enable_collectives(cluster_spec, job, task, protocol, leader)
    _revive_lookup_tables()


def _revive_lookup_tables() -> None:
    """Makes every eager table with an initializer (`StaticHashTable`:
    `StringLookup`, `IntegerLookup`, `TextVectorization`) again in the
    current context, under its shared name, and fills it again. A reset
    context has lost the tables of the old one, and every handle to them
    (a `tf.data` map's captured handle too) finds the new table by that
    name. Anonymous tables, and tables that are filled at run time
    (`MutableHashTable`), cannot be made again and stay lost.
    """
    import gc

    from tensorflow.python.framework import ops
    from tensorflow.python.ops import lookup_ops

    for table in gc.get_objects():
        if (
            isinstance(table, lookup_ops.InitializableLookupTableBase)
            and not getattr(table, "_is_anonymous", False)
            and isinstance(
                getattr(table, "_resource_handle", None), ops.EagerTensor
            )
        ):
            table._resource_handle = table._create_resource()
            table._init_op = table._initialize()


def check_peer_health(task: str, timeout_ms: int) -> None:
    """Raises if the server of `task` (`/job:j/replica:0/task:i`) does not
    answer within `timeout_ms`."""
    from tensorflow.python.eager import context

    context.context().check_collective_ops_peer_health(
        task, timeout_in_ms=timeout_ms
    )


def abort_collectives(message: str) -> None:
    """Fails every pending and later collective of this process with
    `UnavailableError(message)`."""
    from tensorflow.python.eager import context

    context.context().abort_collective_ops(tf.errors.UNAVAILABLE, message)


# -- input (strategy/input_sharding.py)


def dataset_shards(dataset) -> list[tuple[int, int]]:
    """`(num_shards, index)` of every `Dataset.shard` in the chain of
    datasets `dataset` reads from (`_inputs()`, the `_ShardDataset`'s
    `_num_shards` and `_index`), where both are known constants."""
    found, seen, stack = [], set(), [dataset]
    while stack:
        node = stack.pop()
        if id(node) in seen or not isinstance(node, tf.data.Dataset):
            continue
        seen.add(id(node))
        if type(node).__name__ == "_ShardDataset":
            shards = tf.get_static_value(getattr(node, "_num_shards", None))
            index = tf.get_static_value(getattr(node, "_index", None))
            if shards is not None and index is not None:
                found.append((int(shards), int(index)))
        try:
            stack.extend(node._inputs())
        except (AttributeError, NotImplementedError):
            continue
    return found


def shard_files(dataset: tf.data.Dataset, rank: int, size: int):
    """TensorFlow's file-level auto-sharding of a dataset of global
    batches, rebatched to this worker's batch, as
    `MultiWorkerMirroredStrategy` does for `AutoShardPolicy.FILE`."""
    from tensorflow.python.data.experimental.ops import distribute as tf_data
    from tensorflow.python.distribute import input_ops

    batch_size = tf_data.compute_batch_size(dataset)
    batch_sizes = tf_data.batch_sizes_for_worker(batch_size, size, 1, rank)
    dataset = dataset.rebatch(batch_sizes)
    return input_ops.auto_shard_dataset(dataset, size, rank, size)


# -- gradients (sparse/table_gradients.py, lookup.py, hot_rows.py,
# shard_regularizers.py)

# The graph collection that owns the gradient functions moved out of TF's
# registry (`custom_gradient_owned_by_graph`).
_OWNED = "keras_hybrid_custom_gradients"


def custom_gradient_owned_by_graph(fn, *args):
    """`fn(*args)` for a `tf.custom_gradient` function `fn`, with the
    gradient function of each call owned by the graph being traced.

    In a graph, each `tf.custom_gradient` call registers its gradient
    function in TF's global gradient registry (`ops._gradient_registry`,
    under a new `CustomGradient-<uid>` name, one the call's `IdentityN`
    op names) for the life of the process, and that function refers to
    the call's tensors (so to their graph) and to the variables it read:
    every traced step would keep its graph, and the tables it read, alive
    after its model is gone. Here each new entry's function goes into a
    collection of the graph (`Graph.add_to_collection`), the registry
    keeps a stand-in that reaches it through a weak reference to the
    graph, and the name leaves the registry when the graph is collected.
    Eagerly nothing is registered and nothing changes.
    """
    import itertools
    import weakref

    from tensorflow.python.framework import ops

    entries = ops._gradient_registry._registry
    before = len(entries)
    graph = ops.get_default_graph()
    first_op = len(graph.get_operations()) if not tf.executing_eagerly() else 0
    result = fn(*args)
    added = len(entries) - before
    if added <= 0:
        return result
    # The names this call's ops use (the IdentityN's gradient override),
    # not another thread's that registered meanwhile.
    used = {
        op.get_attr("_gradient_op_type").decode()
        for op in graph.get_operations()[first_op:]
        if "_gradient_op_type" in op.node_def.attr
    }
    new = set(itertools.islice(reversed(entries), added))
    graph_ref = weakref.ref(graph)
    for name in new & used:
        entry = entries[name]
        graph.add_to_collection(_OWNED, (name, entry["type"]))
        entry["type"] = _OwnedGradient(graph_ref, name)
        weakref.finalize(graph, entries.pop, name, None)
    return result


class _OwnedGradient:
    """A registry entry that calls the gradient function its graph owns."""

    def __init__(self, graph_ref, name: str) -> None:
        self._graph_ref, self._name = graph_ref, name

    def __call__(self, *args, **kwargs):
        graph = self._graph_ref()
        if graph is None:
            raise LookupError(f"The graph of {self._name} is gone.")
        owned = dict(graph.get_collection(_OWNED))
        return owned[self._name](*args, **kwargs)

"""The only place that touches private TensorFlow and Keras API.

Every hook is a small named function (or base class) in `tf.py`,
`keras.py` or `one_process_extended.py`; the rest of the package calls
these and public API only. `tests/compat/test_hooks.py` checks each hook in
every supported version: TF 2.15.1 (with Keras 3.15 and Horovod 0.28.1),
2.16.2, 2.19.1 and 2.21.0 (`make test`, `make test-horovod`,
`make test-matrix`).

TensorFlow (`tf.py`, `one_process_extended.py`):

- `OneProcessExtended`: subclasses `one_device_strategy.OneDeviceExtended`
  and sends its private hooks (`_call_for_each_replica`, `_reduce_to`,
  `_batch_reduce_to`, `_gather_to_implementation`, `_update`,
  `_create_variable`, `_experimental_distribute_dataset`,
  `_distribute_datasets_from_function`,
  `_experimental_distribute_values_from_function`,
  `_num_replicas_in_sync`, `_in_multi_worker_mode`) to named methods; reads
  `_device` and `_container_strategy()`;
- `ConvertibleVariable`: `resource_variable_ops.ResourceVariable` with its
  `_serialize_to_tensors` and `_restore_from_tensors` (what a
  `tf.train.Checkpoint` writes and reads back, under `trackable`'s
  `VARIABLE_VALUE_KEY`) sent to `checkpoint_value` and `restore_value`, its
  `_dense_var_to_tensor` sent to `to_tensor`, the static shape of
  `_read_variable_op`'s result given by `read_shape`, and its reads cut
  to the rows `rows_read` names (`read_rows`, a slice of a whole read);
  its `stored_tensor_shared` and `read_rows` rely on the copy-on-read
  mode of resource variables, which `disable_copy_on_read` (the public
  `DisableCopyOnRead` op) turns off;
- `all_reduce`, `all_gather`, `all_to_all`, `broadcast_send`,
  `broadcast_recv`: `collective_ops`' V2 ops;
- `run_independently`: a traced graph's `experimental_acd_manager`, which
  keeps a collective send that no output depends on (the per-pair
  all-to-all's sends) among the function's must-run ops;
- `enable_collectives`: the eager context's `configure_collective_ops`,
  `enable_collective_ops` and the `ServerDef` proto, with any task as the
  collective leader;
- `reset_collectives`: `context._reset_context` (a new eager context), then
  `enable_collectives` on new addresses, possibly with another leader (an
  elastic job's survivors, who may have lost the leader); then every
  `lookup_ops.InitializableLookupTableBase` alive (`gc`) is made again
  (`_create_resource`, `_initialize`, `_resource_handle`, `_is_anonymous`);
- `check_peer_health`, `abort_collectives`: the eager context's
  `check_collective_ops_peer_health` and `abort_collective_ops`;
- `shard_files`: `data.experimental.ops.distribute`'s batch-size helpers
  and `distribute.input_ops.auto_shard_dataset`;
- `keep_variable_key`: a `ResourceVariable`'s `_unique_id`, which Keras'
  TF optimizer uses as the key of its per-variable state;
- `plain_variable`: `ResourceVariable` built directly so that no
  variable-creator scope sees it, with the `_distribute_strategy` of the
  variable it replaces;
- `tape_records`: `eager.record.could_possibly_record` (whether any
  gradient tape is active);
- `tape_watches`: `eager.record.should_record_backprop` (whether an
  active tape records a tensor's gradient);
- `in_shape_query`: the Python stack, for `array_ops.shape_internal`
  (eager `tf.shape` converts a Keras variable's whole value);
- `dataset_shards`: a `tf.data.Dataset`'s `_inputs()` and
  `_ShardDataset`'s `_num_shards` and `_index` (a pipeline the user
  sharded by worker);
- `in_while_loop`: `ops.control_flow_util_v2.in_while_loop_defun` and
  `CondBranchFuncGraph` (whether a trace is inside a `tf.while_loop`);
- `embedding_lookup_module`: `ops.embedding_ops`, whose module-level
  `embedding_lookup` `tf.nn.embedding_lookup`, `embedding_lookup_sparse`
  and `nn_impl`'s sampled losses call by name (`patches/tf_lookups.py`
  replaces it);
- `custom_gradient_owned_by_graph`: `ops._gradient_registry`'s entries
  (their `"type"`), where `tf.custom_gradient` leaves each graph-mode
  call's gradient function for the life of the process.

Keras (`keras.py`):

- `variable_info`: the closure Keras' TF `Variable` passes to
  `tf.Variable` as `initial_value` (`self`, `initializer`);
- `in_symbolic_scope`: `keras.src.backend.common.symbolic_scope`;
- `variables_made_now`: the `"stateless_scope"` global attribute of
  `keras.src.backend.common.global_state`, cleared for a while;
- `set_variable_storage`: a Keras TF `Variable`'s `_value`;
- `own_variables`, `last_trainable_variables`, `accumulators`,
  `iterations_variable`, `apply_accumulated_update`: an optimizer's
  `_variables`, `_trainable_variables`, `_accumulated_gradients`,
  `_get_variable_index`, `_iterations`, `_clip_gradients`,
  `_apply_weight_decay`, `_backend_update_step`;
- `set_initial_epoch`: a model's `_initial_epoch`;
- `printed_by_keras`: the file Keras' `io_utils.print_msg` logs from;
- `draw_progress_in_place`: `keras.utils.Progbar`'s `_dynamic_display`;
- `traced_step_of`: the `multi_step_on_iterator` `tf.function` in the
  closure of Keras' TF `train_function` (an elastic joiner traces it
  ahead);
- `set_validation_gate`: an instance attribute shadowing
  `Trainer._should_eval` (an elastic joiner skips the validation of the
  epochs it skips);
- `epoch_dataset_spec`: the `_distributed_dataset` of Keras' TF
  `TFEpochIterator` (its element spec builds the model);
- `unbuilt_if_failed`: a model's `_flatten_layers`, and each layer's
  `_tracker` (its `stored_ids`, and `unlock`): a layer that a failed
  early call only marked built is unbuilt again;
- `h5_dataset`: `saving_lib.H5IOStore`'s `_h5_entry_initialized`,
  `_create_h5_group`, `_h5_entry_path`, `_h5_entry_group`;
- `current`, `replace` on the patch sites `SITES`: `saving_api.save_model`
  and `save_weights`, `export.export_saved_model`, the `file_utils` of
  four callback modules, `saving_lib.H5IOStore.__setitem__`,
  `TensorBoard.summary`, `TensorBoard._start_profiler`, and
  `losses.loss.scale_loss_for_distribution` and
  `unscale_loss_for_distribution` (elastic jobs scale by the current
  group size; the first also counts the loss scalings a `compute_loss`
  made), `TensorFlowTrainer._maybe_symbolic_build` (the model is built
  from the dataset's spec, not from a batch drawn from it) and
  `Trainer._compute_loss` (a `compute_loss` that averages by itself is
  scaled as Keras' losses are), `BaseOptimizer._clip_gradients` and
  `TFOptimizer._all_reduce_sum_gradients` (an optimizer clips the
  gradients summed over workers), and `losses.loss.reduce_weighted_values`
  (a loss averaged over its mask or sample weights divides by the global
  batch's count);
- `loss_divisor`: `losses.loss.standardize_reduction`, `apply_mask` and
  `squeeze_or_expand_to_same_rank`, to find what a loss divides by;
- `variable_storage`, `autocast_read`: a Keras variable's `_value` and
  `_maybe_autocast` (a replicated table gathered by rows).
"""

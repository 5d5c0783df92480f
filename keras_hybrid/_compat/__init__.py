"""The only place that touches private TensorFlow and Keras API.

Every hook is a small named function in `tf.py` or `keras.py`; the rest
of the package calls these and public API only. `tests/compat/` checks
each hook in every supported TensorFlow version.

Hooks (tested on TF 2.21 with Keras 3.15):

- `keras.variable_info`: the closure Keras' TF `Variable` passes to
  `tf.Variable` as `initial_value` (`self`, `initializer`);
- `keras.in_symbolic_scope`: `keras.src.backend.common.symbolic_scope`;
- `keras.set_variable_storage`: a Keras TF `Variable`'s `_value`;
- `tf.keep_variable_key`: a `ResourceVariable`'s `_unique_id`, which
  Keras' TF optimizer uses as the key of its per-variable state;
- `tf.plain_variable`: `resource_variable_ops.ResourceVariable`, built
  directly so that no variable-creator scope sees it, with the
  `_distribute_strategy` of the variable it replaces;
- `tf.in_shape_query`: the Python stack, for `array_ops.shape_internal`
  (eager `tf.shape` converts a Keras variable's whole value);
- `keras.loss_scaling_functions` / `keras.set_loss_scaling_functions`:
  `keras.src.losses.loss.scale_loss_for_distribution` and
  `unscale_loss_for_distribution`, looked up at call time by Keras' TF
  trainer (elastic jobs scale by the current group size);
- `keras.traced_step_of`: the `multi_step_on_iterator` `tf.function` in
  the closure of Keras' TF `train_function` (a joiner traces it ahead);
- `keras.set_validation_gate`: an instance attribute shadowing
  `Trainer._should_eval` (a joiner skips the validation of epochs it
  skips).
"""

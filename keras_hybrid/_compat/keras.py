"""Private Keras 3 hooks (see the package docstring for the list)."""

import contextlib
import importlib

import keras
from keras.src.backend.common import global_state
from keras.src.backend.common import symbolic_scope


def variable_info(initial_value):
    """`(keras.Variable, initializer)` behind a `tf.Variable` request.

    Keras' TF `Variable._initialize_with_initializer` passes
    `lambda: initializer(self._shape, dtype=self._dtype)` to `tf.Variable`;
    its closure names the Keras variable and its initializer. Returns None
    for anything else (plain TF code).
    """
    closure = getattr(initial_value, "__closure__", None)
    if not callable(initial_value) or not closure:
        return None
    cells = dict(
        zip(
            initial_value.__code__.co_freevars,
            (cell.cell_contents for cell in closure),
            strict=True,
        )
    )
    variable, initializer = cells.get("self"), cells.get("initializer")
    if not isinstance(variable, keras.Variable) or initializer is None:
        return None
    return variable, initializer


def in_symbolic_scope() -> bool:
    """Whether Keras is computing output specs (a graph never run)."""
    return symbolic_scope.in_symbolic_scope()


@contextlib.contextmanager
def variables_made_now():
    """Within, Keras variables hold their value as they are made, also
    inside a stateless scope (Keras' symbolic build of a subclassed
    model), where Keras would defer it to the scope's end."""
    scope = global_state.get_global_attribute("stateless_scope")
    global_state.set_global_attribute("stateless_scope", None)
    try:
        yield
    finally:
        global_state.set_global_attribute("stateless_scope", scope)


def set_variable_storage(variable: keras.Variable, storage) -> None:
    """Makes `storage` (a `tf.Variable`) the value of Keras `variable`."""
    variable._value = storage


def variable_storage(variable: keras.Variable):
    """The `tf.Variable` that holds Keras `variable`'s value."""
    return variable._value


def autocast_read(variable: keras.Variable, value):
    """`value`, read from `variable`'s storage, cast as Keras casts the
    variable's reads inside an autocast scope (mixed precision)."""
    return variable._maybe_autocast(value)


# -- optimizer internals (optimizers/hybrid_optimizer.py): gradient
# accumulation runs the inner optimizer's accumulated update itself, as
# `BaseOptimizer._backend_apply_gradients` does.


def own_variables(optimizer: keras.optimizers.Optimizer) -> list:
    """The variables `optimizer` itself tracks (not its inner one's)."""
    return list(optimizer._variables)


def last_trainable_variables(optimizer: keras.optimizers.Optimizer) -> list:
    """The variables `optimizer` was built for."""
    return list(optimizer._trainable_variables)


def accumulators(optimizer: keras.optimizers.Optimizer, variables) -> list:
    """`optimizer`'s gradient accumulator of each variable."""
    return [
        optimizer._accumulated_gradients[optimizer._get_variable_index(v)]
        for v in variables
    ]


def iterations_variable(optimizer: keras.optimizers.Optimizer):
    """The variable behind `optimizer.iterations` (assignable)."""
    return optimizer._iterations


def apply_accumulated_update(
    optimizer: keras.optimizers.Optimizer, grads, variables
) -> None:
    """Clips `grads`, applies weight decay and one update step."""
    grads = optimizer._clip_gradients(grads)
    optimizer._apply_weight_decay(variables)
    optimizer._backend_update_step(grads, variables, optimizer.learning_rate)


# -- console (strategy/quiet_ranks.py)


def printed_by_keras(record) -> bool:
    """Whether a log record is Keras' console output: with interactive
    logging off, `keras.src.utils.io_utils.print_msg` logs through absl
    from its own file."""
    return record.filename == "io_utils.py"


def draw_progress_in_place(progbar, in_place: bool) -> None:
    """Whether `keras.utils.Progbar` redraws its line with `\b`/`\r`
    (its `_dynamic_display`, which Keras also sets on every POSIX system,
    pipes and files included)."""
    progbar._dynamic_display = bool(in_place)


# -- models (callbacks/sharded_checkpoint.py)


def set_initial_epoch(model: keras.Model, epoch: int) -> None:
    """Makes a running `fit` (in `on_train_begin`) start at `epoch`, as
    `BackupAndRestore` does."""
    model._initial_epoch = epoch


def traced_step_of(train_function):
    """The `tf.function` inside Keras' TF `train_function`, or None.

    Keras 3's TF trainer returns a plain closure `function(iterator)` that
    calls the `tf.function` `multi_step_on_iterator` (absent when the model
    runs eagerly). Tracing that one ahead, with
    `get_concrete_function(iterator)`, saves the first step its tracing.
    """
    cells = getattr(train_function, "__closure__", None) or ()
    names = getattr(
        getattr(train_function, "__code__", None), "co_freevars", ()
    )
    for name, cell in zip(names, cells, strict=False):
        if name == "multi_step_on_iterator":
            step = cell.cell_contents
            return step if hasattr(step, "get_concrete_function") else None
    return None


def set_validation_gate(model, is_open) -> None:
    """Makes `fit` validate only while `is_open()` is True (None: Keras'
    own rule again).

    Keras' `fit` asks `model._should_eval(epoch, validation_freq)` at each
    epoch end; an instance attribute shadows that method.
    """
    if is_open is None:
        model.__dict__.pop("_should_eval", None)
        return
    should_eval = type(model)._should_eval

    def gated(epoch, validation_freq):
        return is_open() and should_eval(model, epoch, validation_freq)

    model._should_eval = gated


# -- building (patches/build_from_spec.py, strategy/placement_trace.py)


@contextlib.contextmanager
def unbuilt_if_failed(model):
    """A scope for a call of `model` made before plain Keras would make it
    (a symbolic build, a scratch trace): if the call raises, each layer it
    built without creating any state, in the layer or below it, is marked
    unbuilt again, as plain Keras leaves it. keras-rs'
    `BruteForceRetrieval` is built by `update_candidates` only once."""
    if not isinstance(model, keras.layers.Layer):
        yield
        return
    before = [
        (layer, layer.built, _state_size(layer))
        for layer in model._flatten_layers(include_self=True)
    ]
    try:
        yield
    except Exception:
        for layer, built, size in before:
            if layer.built and not built and _state_size(layer) == size:
                layer.built = False
                if getattr(layer, "_tracker", None) is not None:
                    layer._tracker.unlock()
        raise


def _state_size(layer) -> tuple:
    """The variables in and below `layer`, and what its own tracker holds
    (variables, sub-layers, metrics, seed generators)."""
    tracker = getattr(layer, "_tracker", None)
    stores = getattr(tracker, "stored_ids", None) or {}
    return len(layer.weights), sum(len(ids) for ids in stores.values())


# -- saving (patches/h5_streaming.py)


def epoch_dataset_spec(epoch_iterator):
    """The element spec of the (distributed) dataset a Keras TF
    `TFEpochIterator` iterates, or None."""
    dataset = getattr(epoch_iterator, "_distributed_dataset", None)
    return getattr(dataset, "element_spec", None)


def h5_dataset(store, key: str, shape, dtype):
    """Creates dataset `key` in the group of a `.h5` weights store entry
    (`saving_lib.H5IOStore`, as passed to its `__setitem__`)."""
    if not store._h5_entry_initialized:
        store._create_h5_group(store._h5_entry_path)
    return store._h5_entry_group.create_dataset(key, shape=shape, dtype=dtype)


def loss_divisor(values, sample_weight, mask, reduction, dtype):
    """What `keras.src.losses.loss.reduce_weighted_values` divides the sum
    of `values` by when that depends on the batch's mask or sample
    weights: the mask's count (reduction `"sum_over_batch_size"` or
    `"mean"` with a mask), or the sum of the weights Keras applies
    (`"mean_with_sample_weight"`). None when it divides by the number of
    elements, or not at all."""
    from keras.src.losses import loss as loss_module

    reduction = loss_module.standardize_reduction(reduction)
    values = keras.ops.convert_to_tensor(values, dtype=dtype)
    if tuple(values.shape) in ((), (0,)):
        return None
    if reduction in ("sum_over_batch_size", "mean"):
        if mask is None:
            return None
        return keras.ops.sum(keras.ops.cast(mask, values.dtype))
    if reduction != "mean_with_sample_weight":
        return None
    if sample_weight is not None:
        sample_weight = keras.ops.convert_to_tensor(sample_weight, dtype)
    if mask is not None:
        mask = keras.ops.convert_to_tensor(mask, dtype=dtype)
    weights = loss_module.apply_mask(
        sample_weight, mask, dtype=values.dtype, reduction=reduction
    )
    if weights is None:
        return None
    weights = keras.ops.cast(weights, values.dtype)
    _, weights = loss_module.squeeze_or_expand_to_same_rank(values, weights)
    return keras.ops.sum(weights)


# -- what keras_hybrid replaces while a strategy is open (`patches/`)

_SITES = {
    "save_model": ("keras.src.saving.saving_api", None, "save_model"),
    "save_weights": ("keras.src.saving.saving_api", None, "save_weights"),
    "export_saved_model": ("keras.src.export", None, "export_saved_model"),
    "backup_and_restore.file_utils": (
        "keras.src.callbacks.backup_and_restore",
        None,
        "file_utils",
    ),
    "model_checkpoint.file_utils": (
        "keras.src.callbacks.model_checkpoint",
        None,
        "file_utils",
    ),
    "csv_logger.file_utils": (
        "keras.src.callbacks.csv_logger",
        None,
        "file_utils",
    ),
    "tensorboard.file_utils": (
        "keras.src.callbacks.tensorboard",
        None,
        "file_utils",
    ),
    "H5IOStore.__setitem__": (
        "keras.src.saving.saving_lib",
        "H5IOStore",
        "__setitem__",
    ),
    "TensorBoard.summary": (
        "keras.src.callbacks.tensorboard",
        "TensorBoard",
        "summary",
    ),
    "TensorBoard.start_profiler": (
        "keras.src.callbacks.tensorboard",
        "TensorBoard",
        "_start_profiler",
    ),
    # Draws a batch from a fresh iterator only to read its shapes
    # (patches/build_from_spec.py).
    "TensorFlowTrainer._maybe_symbolic_build": (
        "keras.src.backend.tensorflow.trainer",
        "TensorFlowTrainer",
        "_maybe_symbolic_build",
    ),
    # Runs a model's `compute_loss` in train and test steps
    # (patches/loss_scaling.py).
    "Trainer._compute_loss": (
        "keras.src.trainers.trainer",
        "Trainer",
        "_compute_loss",
    ),
    # Looked up on the module at call time by Keras' TF trainer and
    # `compile_utils`; elastic jobs scale by the current group size.
    "scale_loss_for_distribution": (
        "keras.src.losses.loss",
        None,
        "scale_loss_for_distribution",
    ),
    "unscale_loss_for_distribution": (
        "keras.src.losses.loss",
        None,
        "unscale_loss_for_distribution",
    ),
    # Reduces a loss object's per-element losses, dividing by the count
    # of its mask or the sum of its sample weights (patches/loss_means.py).
    "reduce_weighted_values": (
        "keras.src.losses.loss",
        None,
        "reduce_weighted_values",
    ),
    # An optimizer's clipping, and its sum over replicas after it
    # (patches/gradient_clipping.py).
    "BaseOptimizer._clip_gradients": (
        "keras.src.optimizers.base_optimizer",
        "BaseOptimizer",
        "_clip_gradients",
    ),
    "TFOptimizer._all_reduce_sum_gradients": (
        "keras.src.backend.tensorflow.optimizer",
        "TFOptimizer",
        "_all_reduce_sum_gradients",
    ),
}
SITES = tuple(_SITES)


class _PrivateSites:
    """The target of patches at the private sites above (`patches`)."""

    def __repr__(self) -> str:
        return "PRIVATE_SITES"


PRIVATE_SITES = _PrivateSites()


def _owner_and_name(site: str):
    if site not in _SITES:
        raise ValueError(f"Unknown Keras patch site {site!r}; one of {SITES}.")
    module_name, class_name, attribute = _SITES[site]
    owner = importlib.import_module(module_name)
    if class_name is not None:
        owner = getattr(owner, class_name)
    return owner, attribute


def current(site: str):
    """What Keras has at `site` now (a class attribute as stored: a
    property stays a property)."""
    owner, attribute = _owner_and_name(site)
    if isinstance(owner, type):
        return owner.__dict__[attribute]
    return getattr(owner, attribute)


def replace(site: str, value) -> object:
    """Puts `value` at `site`; returns what was there (see `current`)."""
    previous = current(site)
    owner, attribute = _owner_and_name(site)
    setattr(owner, attribute, value)
    return previous

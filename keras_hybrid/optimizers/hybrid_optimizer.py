"""`HybridOptimizer`: wraps a Keras optimizer for `HybridStrategy`.

For gradient accumulation the wrapper runs the inner optimizer's
accumulated update itself (`_compat.keras`: `accumulators`,
`iterations_variable`, `apply_accumulated_update`), as Keras'
`BaseOptimizer` does, so that a table's gradient stays marked as pushed.
"""

import keras
import tensorflow as tf

from keras_hybrid._compat import keras as keras_compat
from keras_hybrid.optimizers import sparse_support
from keras_hybrid.sparse import sharded_table
from keras_hybrid.sparse import table_gradients

SPARSE_GRADIENTS = ("mean", "sum")


class HybridOptimizer(keras.optimizers.Optimizer):
    """Applies a Keras optimizer to dense and partitioned variables.

    Under `HybridStrategy`, dense gradients are all-reduced and each worker
    applies `inner_optimizer` to its replica; the gradient of a partitioned
    table has already been pushed to the worker that owns each row, and the
    owner applies `inner_optimizer` to its rows (and to the slots, such as
    Adam's m and v, stored with them). The strategy does this routing for
    any Keras optimizer; the wrapper adds:

    - `sparse_gradients="sum"` (Parallax's `average_sparse=False`);
    - gradient accumulation that works with partitioned and dynamic
      tables: dense gradients are accumulated locally and all-reduced
      once per `gradient_accumulation_steps`, table gradients are pushed
      every step and accumulated by their owner;
    - a check, when built, that the optimizer can update a table shard by
      shard (`NotImplementedError` naming the workaround otherwise).

    Semantics: gradients of one id are summed before the optimizer sees
    them (on each worker, then across workers), so Adam, Adagrad and
    RMSprop follow dense-gradient semantics: a duplicated id counts as one
    row whose gradient is the sum, not as separate rows.

    Args:
        inner_optimizer: A `keras.optimizers.Optimizer` to wrap, not yet
            built. Its `gradient_accumulation_steps` is honoured (its
            accumulators are used) by the wrapper.
        sparse_gradients: String, one of `("mean", "sum")`. `"mean"`
            averages table gradients over workers like dense ones, so N
            workers on a global batch match one process on it. `"sum"`
            sums them (N times larger). Defaults to `"mean"`.
        name: Optional string. Name of the wrapper.

    Example:

    ```python
    with strategy.scope():
        model = build_model()
        model.compile(
            optimizer=keras_hybrid.HybridOptimizer(
                keras.optimizers.Adam(1e-3, gradient_accumulation_steps=4)
            ),
            loss="sparse_categorical_crossentropy",
        )
    ```

    Raises:
        TypeError: If `inner_optimizer` is not a Keras optimizer.
        ValueError: If `sparse_gradients` is unknown, or the inner
            optimizer is already built.
    """

    def __init__(
        self, inner_optimizer, sparse_gradients: str = "mean", name=None
    ) -> None:
        if not sparse_support.is_keras_optimizer(inner_optimizer):
            raise TypeError(
                "`inner_optimizer` must be a `keras.optimizers.Optimizer`. "
                f"Received: inner_optimizer={inner_optimizer!r}"
            )
        if isinstance(inner_optimizer, HybridOptimizer):
            raise TypeError(
                "`inner_optimizer` is already a HybridOptimizer; wrap the "
                "Keras optimizer once."
            )
        if sparse_gradients not in SPARSE_GRADIENTS:
            raise ValueError(
                f"`sparse_gradients` must be one of {SPARSE_GRADIENTS}. "
                f"Received: sparse_gradients={sparse_gradients!r}"
            )
        if inner_optimizer.built:
            raise ValueError(
                "`inner_optimizer` must not be built yet: the wrapper "
                "builds it, after checking it can update partitioned "
                "tables. Received a built "
                f"{type(inner_optimizer).__name__}."
            )
        super().__init__(learning_rate=0.0, name=name)
        self.inner_optimizer = inner_optimizer
        self.sparse_gradients = sparse_gradients

    # -- delegation

    @property
    def learning_rate(self):
        return self.inner_optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, learning_rate):
        self.inner_optimizer.learning_rate = learning_rate

    @property
    def iterations(self):
        return self.inner_optimizer.iterations

    @property
    def variables(self):
        return keras_compat.own_variables(self) + self.inner_optimizer.variables

    def scale_loss(self, loss):
        return self.inner_optimizer.scale_loss(loss)

    def finalize_variable_values(self, var_list):
        self.inner_optimizer.finalize_variable_values(var_list)

    # -- building and applying

    def build(self, var_list):
        sparse_support.check(self.inner_optimizer, var_list, wrapped=True)
        # With `gradient_accumulation_steps`, the inner optimizer creates
        # its accumulators here; tables' ones are partitioned with them.
        self.inner_optimizer.build(var_list)
        super().build(var_list)

    def apply(self, grads, trainable_variables=None):
        if trainable_variables is None:
            trainable_variables = keras_compat.last_trainable_variables(self)
        trainable_variables = list(trainable_variables)
        if not self.built:
            with keras.name_scope(self.name, caller=self):
                self.build(trainable_variables)
        pairs = [
            (self._scale_sparse(g), v)
            for g, v in zip(grads, trainable_variables, strict=True)
            if g is not None
        ]
        if not pairs:
            return
        grads, variables = (list(x) for x in zip(*pairs, strict=True))
        inner = self.inner_optimizer
        steps = inner.gradient_accumulation_steps
        if not steps:
            inner.apply(grads, variables)
            return
        accumulators = keras_compat.accumulators(inner, variables)
        iterations = keras_compat.iterations_variable(inner)
        with keras.name_scope(inner.name, caller=inner):
            keras.ops.cond(
                (iterations + 1) % steps == 0,
                lambda: self._apply_accumulated(grads, variables, accumulators),
                lambda: self._accumulate(grads, accumulators),
            )
            iterations.assign_add(1)

    def _scale_sparse(self, grad):
        if self.sparse_gradients == "mean" or grad is None:
            return grad
        if table_gradients.table_of(grad) is None:
            return grad
        workers = tf.distribute.get_strategy().num_replicas_in_sync
        return tf.IndexedSlices(
            grad.values * workers, grad.indices, grad.dense_shape
        )

    def _accumulate(self, grads, accumulators):
        with sharded_table.shard_view():
            for grad, acc in zip(grads, accumulators, strict=True):
                _add_to(acc, grad)

    def _apply_accumulated(self, grads, variables, accumulators):
        """Keras' accumulated update, but a table's gradient stays marked
        as pushed (Keras would densify it into a tensor the strategy
        cannot tell from a dense gradient)."""
        inner = self.inner_optimizer
        steps = inner.gradient_accumulation_steps
        mean_grads = []
        with sharded_table.shard_view():
            for grad, var, acc in zip(
                grads, variables, accumulators, strict=True
            ):
                _add_to(acc, grad)
                mean = acc.value / steps
                mean_grads.append(_as_gradient_of(var, grad, mean))
        if inner.loss_scale_factor is not None:
            mean_grads = [g / inner.loss_scale_factor for g in mean_grads]
        keras_compat.apply_accumulated_update(inner, mean_grads, variables)
        for var in variables:
            if var.constraint is not None:
                var.assign(var.constraint(var))
        with sharded_table.shard_view():
            for acc in accumulators:
                acc.value.assign(tf.zeros_like(acc.value))

    # -- serialization

    def get_config(self):
        return {
            "name": self.name,
            "inner_optimizer": keras.saving.serialize_keras_object(
                self.inner_optimizer
            ),
            "sparse_gradients": self.sparse_gradients,
        }

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        inner = keras.saving.deserialize_keras_object(
            config.pop("inner_optimizer"), custom_objects=custom_objects
        )
        return cls(inner, **config)


def _add_to(accumulator, grad) -> None:
    """Adds one step's `grad` into `accumulator`: a sparse gradient (a
    table's pushed rows) by scatter-add, so the add costs its rows, not
    the table's."""
    if isinstance(grad, tf.IndexedSlices):
        accumulator.value.scatter_add(grad)
    else:
        accumulator.value.assign_add(tf.convert_to_tensor(grad))


def _as_gradient_of(variable, grad, gradient):
    """A table's accumulated `gradient` goes back to its owner untouched:
    it is marked as the pushed gradient of the table that `grad` (this
    step's gradient) or `variable` belongs to."""
    table = table_gradients.table_of(grad)
    if table is None:
        table = getattr(variable, "value", None)
        if not isinstance(table, sharded_table.ShardedTable):
            return gradient
    rows = tf.range(tf.shape(gradient)[0], dtype=tf.int64)
    return table_gradients.make(table, gradient, rows)

"""Pool scenario: trains every [model, policy, optimizer] config under
one `HybridStrategy` with the table forced sparse, and returns per config
the full weights before and after, the loss-scale state after each step,
and the dtypes that went through the pull and push all-to-alls.

Run by `tests/sparse/test_mixed_precision_multiprocess.py`, one scenario
per worker count. Ranks seed differently on purpose (see
`equivalence_scenarios.py`).
"""

import keras
import mixed_precision_cases as cases  # noqa: I001  (sits beside this module)

import keras_hybrid as kh
from keras_hybrid.sparse import prefetch
from keras_hybrid.sparse.sharded_table import ShardedTable


def train(configs: list) -> dict:
    """Trains each [model, policy, optimizer] of `configs`."""
    with kh.HybridStrategy(
        timeout_seconds=60, variable_kinds={cases.TABLE: "sparse"}
    ) as strategy:
        results = {"size": strategy.size}
        for model_name, policy, opt_name in configs:
            results[cases.key(model_name, policy, opt_name)] = train_one(
                strategy, model_name, policy, opt_name
            )
        return results


class LossScaleLog(keras.callbacks.Callback):
    """`(iterations, dynamic_scale, step_counter)` after every step."""

    def __init__(self) -> None:
        super().__init__()
        self.steps = []

    def on_train_batch_end(self, batch, logs=None):
        opt = self.model.optimizer
        if not isinstance(opt, keras.optimizers.LossScaleOptimizer):
            return
        self.steps.append(
            (
                int(opt.iterations.numpy()),
                float(opt.dynamic_scale.numpy()),
                int(opt.step_counter.numpy()),
            )
        )


def record_exchange_dtypes(communicator) -> set:
    """Records `(path, dtype)` of every all-to-all traced from now on."""
    seen = set()
    original = communicator.all_to_all

    def all_to_all(tensor, send_counts, path="control", plan=None):
        seen.add((path, tensor.dtype.name))
        return original(tensor, send_counts, path=path, plan=plan)

    communicator.all_to_all = all_to_all
    return seen


def record_traced_ahead() -> list:
    """Records the name of every function whose lookups the strategy
    traces ahead (`sparse.prefetch.discover`) from now on."""
    seen = []
    original = prefetch.discover

    def discover(fn, args, kwargs):
        seen.append(getattr(fn, "__name__", repr(fn)))
        return original(fn, args, kwargs)

    prefetch.discover = discover
    return seen, original


def train_one(strategy, model_name, policy, opt_name):
    keras.utils.set_random_seed(cases.SEED + 1000 * strategy.rank)
    keras.mixed_precision.set_global_policy(policy)
    loss_scale = None
    if model_name == "boost":
        loss_scale = {"dynamic_growth_steps": 4}
    try:
        with strategy.scope():
            model = cases.build_model(model_name)
            model.compile(
                optimizer=cases.make_optimizer(opt_name, loss_scale),
                loss=cases.make_loss(),
            )
    finally:
        keras.mixed_precision.set_global_policy("float32")
    initial = model.get_weights()
    x, y = cases.make_data(model_name)
    log = LossScaleLog()
    dtypes = record_exchange_dtypes(strategy.communicator)
    traced_ahead, discover = record_traced_ahead()
    try:
        history = model.fit(
            x,
            y,
            batch_size=cases.BATCH,
            epochs=1,
            shuffle=False,
            verbose=0,
            callbacks=[log],
        )
    finally:
        del strategy.communicator.all_to_all
        prefetch.discover = discover
    table = model.get_layer("table")
    return {
        "initial": initial,
        "final": model.get_weights(),
        "loss": history.history["loss"],
        "kind": strategy.plan[cases.TABLE].kind,
        "sharded": isinstance(table.embeddings.value, ShardedTable),
        "optimizer": type(model.optimizer).__name__,
        "loss_scale": log.steps,
        "exchange_dtypes": sorted(dtypes),
        "traced_ahead": sorted(set(traced_ahead)),
        "table_dtype": table.embeddings.dtype,
        "table_compute_dtype": table.compute_dtype,
        "rows_dtype": getattr(table, "rows_dtype", None),
    }

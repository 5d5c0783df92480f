"""Pool scenario: trains every [model, optimizer, accumulation] config
under one `HybridStrategy` and returns, per config, the full weights
before and after training, the plan's kinds and this rank's table shards.

Run by `test_sparse_training_multiprocess.py` on the shared pools of 1, 2
and 4 workers, and over ssh by `equivalence_worker.py`. Ranks other than
0 seed differently on purpose: tables are seeded from rank 0 and dense
variables broadcast, so all ranks (and all worker counts) must still
start from the same weights. Accumulation configs wrap the optimizer in
`keras_hybrid.HybridOptimizer`.
"""

import keras
import sparse_cases as cases  # noqa: I001  (sits beside this module)

import keras_hybrid as kh
from keras_hybrid.sparse.sharded_table import ShardedTable
from keras_hybrid.testing import SPARSE_TABLES


def train(
    configs: list, timeout: float = 60, exchange_schedule: str = ""
) -> dict:
    """Trains each [model, optimizer, accumulation] of `configs`; with
    `exchange_schedule`, the TF engine's pairwise exchange runs in that
    order (`TFCommunicator.exchange_schedule`)."""
    with kh.HybridStrategy(
        timeout_seconds=timeout, variable_kinds=SPARSE_TABLES
    ) as strategy:
        if exchange_schedule:
            strategy.communicator.exchange_schedule = exchange_schedule
        results = {
            "size": strategy.size,
            "engine": strategy.engine,
            "rank": strategy.rank,
        }
        for model_name, opt_name, accumulation in configs:
            name = cases.key(model_name, opt_name, accumulation)
            results[name] = train_one(
                strategy, model_name, opt_name, accumulation
            )
        return results


def _shard_info(variable, rank: int) -> dict:
    """What this rank stores of the (Keras) variable `variable`."""
    value = variable.value
    if not isinstance(value, ShardedTable):
        return {"type": type(value).__name__}
    return {
        "type": "ShardedTable",
        "local_shape": tuple(value.shape),
        "full_shape": tuple(value.full_shape),
        "partition": value.partition.get_config(),
        "expected_rows": value.partition.rows_on_shard(rank),
    }


def train_one(strategy, model_name, opt_name, accumulation):
    keras.utils.set_random_seed(cases.SEED + 1000 * strategy.rank)
    extra = {}
    if accumulation:
        extra["gradient_accumulation_steps"] = accumulation
    with strategy.scope():
        model = cases.build_model(model_name)
        if opt_name == "sgd_sum":  # table gradients summed over workers
            optimizer = kh.HybridOptimizer(
                cases.make_optimizer("sgd"), sparse_gradients="sum"
            )
        else:
            optimizer = cases.make_optimizer(opt_name, **extra)
        if accumulation:
            optimizer = kh.HybridOptimizer(optimizer)
        model.compile(optimizer=optimizer, loss=cases.make_loss())
    initial = model.get_weights()
    x, y = cases.make_data()
    before = strategy.communicator.stats.snapshot()
    history = model.fit(
        x, y, batch_size=cases.BATCH, epochs=1, shuffle=False, verbose=0
    )
    moved = strategy.communicator.stats.delta(before)
    final = model.get_weights()
    paths = [v.path for v in model.trainable_variables]
    plan = strategy.plan
    return {
        "initial": initial,
        "final": final,
        "loss": history.history["loss"],
        # Collectives of the sparse paths per train step.
        "sparse_calls": {
            p: moved[p]["calls"] / cases.STEPS
            for p in ("ids", "sparse_pull", "sparse_push")
        },
        "paths": paths,
        "kinds": {path: plan[path].kind for path in paths},
        "plan": str(plan),
        "shards": {
            v.path: _shard_info(v, strategy.rank)
            for v in model.trainable_variables
        },
        # Optimizer state of a table is partitioned with it.
        "slots": {
            v.path: _shard_info(v, strategy.rank)
            for v in model.optimizer.variables
            if len(v.shape) == 2 and v.shape[0] == cases.VOCAB
        },
    }

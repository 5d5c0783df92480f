"""Worker: trains every [model, optimizer, accumulation] config of
`--configs` under `HybridStrategy` and saves, per config, the full weights
before and after training, the plan's kinds and this rank's table shards.

Run by `test_sparse_training_multiprocess.py` through `keras-hybrid-run`,
one launch per worker count. Ranks other than 0 seed differently on
purpose: tables are seeded from rank 0 and dense variables broadcast, so
all ranks (and all worker counts) must still start from the same weights.
Accumulation configs wrap the optimizer in `keras_hybrid.HybridOptimizer`;
while that does not exist their result is None.
"""

import json

import keras
import sparse_cases as cases  # noqa: I001  (sits beside this script)
from absl import app
from absl import flags

import keras_hybrid as kh
from keras_hybrid.sparse.sharded_table import ShardedTable
from keras_hybrid.testing import SPARSE_TABLES
from keras_hybrid.testing.multiprocess import save_result

FLAGS = flags.FLAGS
flags.DEFINE_string("out_dir", None, "Where to save this rank's results.")
flags.DEFINE_string(
    "configs", "[]", "JSON list of [model, optimizer, accumulation]."
)
flags.DEFINE_float("timeout", 60, "Collective timeout in seconds.")


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


def main(argv):
    del argv
    strategy = kh.HybridStrategy(
        timeout_seconds=FLAGS.timeout, variable_kinds=SPARSE_TABLES
    )
    have_wrapper = "HybridOptimizer" in getattr(kh, "__all__", ())
    results = {"size": strategy.size, "engine": strategy.engine}
    for model_name, opt_name, accumulation in json.loads(FLAGS.configs):
        name = cases.key(model_name, opt_name, accumulation)
        if accumulation and not have_wrapper:
            results[name] = None  # keras_hybrid.HybridOptimizer pending
            continue
        results[name] = train_one(strategy, model_name, opt_name, accumulation)
    save_result(FLAGS.out_dir, strategy.rank, results)


if __name__ == "__main__":
    flags.mark_flag_as_required("out_dir")
    app.run(main)

"""Worker: trains every model shape of `placement_shapes` on N workers.

Saves, per shape: the plan (kind, source, reason per path), the full
weights before and after training, and this rank's bytes per traffic path
during `fit`. Run by `test_placement_multiprocess.py`.
"""

import json

import keras
import numpy as np
import placement_shapes as shapes  # noqa: I001  (sits beside this script)
from absl import app
from absl import flags

import keras_hybrid as kh
from keras_hybrid.testing.multiprocess import save_result

FLAGS = flags.FLAGS
flags.DEFINE_string("out_dir", None, "Where to save this rank's results.")
flags.DEFINE_string(
    "shapes",
    "[]",
    "JSON list of (shape, optimizer, mode); mode is "
    "'hybrid' or 'allgather' (every variable replicated, stock TF).",
)
flags.DEFINE_integer("steps", 3, "Training steps.")
flags.DEFINE_integer("batch", shapes.BATCH, "Global batch size.")

BYTES_ONLY = kh.Link(bandwidth="1gbit", latency="0")


def train(shape: str, optimizer: str, mode: str) -> dict:
    keras.backend.clear_session()
    extra = {}
    if mode == "allgather":
        extra = {"variable_kinds": {".*": "dense"}, "indexed_slices": mode}
    strategy = kh.HybridStrategy(timeout_seconds=60, link=BYTES_ONLY, **extra)
    keras.utils.set_random_seed(11 + strategy.rank)
    x, y = shapes.make_data(FLAGS.steps, FLAGS.batch)
    with strategy.scope():
        model = shapes.BUILDERS[shape]()
        if not model.built and not shape.endswith("_unbuilt"):
            model(x[: FLAGS.batch])  # eagerly, as users build models
        model.compile(optimizer=shapes.make_optimizer(optimizer), loss="mse")
    stats = strategy.communicator.stats
    before = stats.snapshot()
    if model.built:
        start = [np.asarray(w) for w in model.get_weights()]
        model.fit(x, y, batch_size=FLAGS.batch, shuffle=False, verbose=0)
    else:  # built by `fit` itself: weights from a first epoch of 0 steps
        model.fit(x, y, batch_size=FLAGS.batch, epochs=0, verbose=0)
        start = [np.asarray(w) for w in model.get_weights()]
        model.fit(x, y, batch_size=FLAGS.batch, shuffle=False, verbose=0)
    sent = stats.delta(before)
    return {
        "plan": {
            v.path: (v.kind, v.source, v.reason)
            for v in strategy.plan.variables
        },
        "plan_text": str(strategy.plan),
        "start": start,
        "end": [np.asarray(w) for w in model.get_weights()],
        "sent": sent,
        "rank": strategy.rank,
        "size": strategy.size,
    }


def main(argv):
    del argv
    results = {}
    for shape, optimizer, mode in json.loads(FLAGS.shapes):
        results[f"{shape}/{optimizer}/{mode}"] = train(shape, optimizer, mode)
    save_result(FLAGS.out_dir, results[next(iter(results))]["rank"], results)


if __name__ == "__main__":
    app.run(main)

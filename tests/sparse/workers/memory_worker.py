"""Worker: trains a model with a big embedding table, records peak RSS.

Run by `tests/sparse/test_memory_multiprocess.py` through `keras-hybrid-run`
on 1 and on 2 workers. Each rank saves its peak resident set size (KiB,
`ru_maxrss` on Linux) before the model exists, after it is built and after
a few `fit` steps with SGD (no optimizer slots).

With `--save_dir` (`tests/checkpoint/test_save_memory_multiprocess.py`) it
then measures what saving adds to the peak (Linux `VmHWM`, reset before
each save): `save_weights` (the chief gathers the whole table) and a
sharded `save_checkpoint` (each rank writes its own rows).
"""

import os
import resource

import keras
import numpy as np
from absl import app
from absl import flags

import keras_hybrid as kh
from keras_hybrid.testing.multiprocess import save_result

FLAGS = flags.FLAGS
flags.DEFINE_string("out_dir", None, "Where to save this rank's results.")
flags.DEFINE_integer("rows", 1_048_576, "Rows V of the embedding table.")
flags.DEFINE_integer("dim", 128, "Row width D of the embedding table.")
flags.DEFINE_integer("batch", 32, "Global batch size.")
flags.DEFINE_integer("steps", 4, "Training steps.")
flags.DEFINE_string("save_dir", None, "If set, measure saving into it.")


def _peak_rss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def _save_growth_kib(save) -> int:
    """Peak RSS added by `save()` over the RSS before it."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS
    before = _status_kib("VmRSS")
    save()
    return _status_kib("VmHWM") - before


def _measure_saves(strategy, model) -> dict:
    return {
        "save_weights": _save_growth_kib(
            lambda: model.save_weights(
                os.path.join(FLAGS.save_dir, "w.weights.h5")
            )
        ),
        "save_checkpoint": _save_growth_kib(
            lambda: strategy.save_checkpoint(model, FLAGS.save_dir)
        ),
    }


def main(argv):
    del argv
    strategy = kh.HybridStrategy(timeout_seconds=120)
    before = _peak_rss_kib()
    with strategy.scope():
        ids = keras.Input((4,), dtype="int32")
        x = keras.layers.Embedding(FLAGS.rows, FLAGS.dim, name="big")(ids)
        x = keras.layers.GlobalAveragePooling1D()(x)
        model = keras.Model(ids, keras.layers.Dense(1)(x))
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    built = _peak_rss_kib()
    rng = np.random.default_rng(0)
    num = FLAGS.batch * FLAGS.steps
    x_data = rng.integers(0, FLAGS.rows, (num, 4), dtype="int32")
    y_data = rng.normal(size=(num, 1)).astype("float32")
    history = model.fit(
        x_data, y_data, batch_size=FLAGS.batch, epochs=1, verbose=0
    )
    trained = _peak_rss_kib()
    table = model.get_layer("big").embeddings.value
    saves = _measure_saves(strategy, model) if FLAGS.save_dir else None
    save_result(
        FLAGS.out_dir,
        strategy.rank,
        {
            "size": strategy.size,
            "local_rows": int(table.shape[0]),
            "peak_rss_kib": {
                "before_model": before,
                "after_build": built,
                "after_fit": trained,
            },
            "loss": history.history["loss"],
            "save_growth_kib": saves,
        },
    )


if __name__ == "__main__":
    flags.mark_flags_as_required(["out_dir"])
    app.run(main)

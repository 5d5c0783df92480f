"""Worker that opens a strategy, fits, closes it, and opens another: Keras
must be stock outside the strategies and patched inside."""

import os
import sys

from absl import app
from absl import flags

import keras_hybrid as kh
from keras_hybrid.strategy import cluster
from keras_hybrid.testing import models
from keras_hybrid.testing.multiprocess import save_result

sys.path.insert(0, os.path.dirname(__file__))
from stock_keras import keras_objects  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("out_dir", None, "Where to save this rank's results.")


def _changed(stock: dict) -> list[str]:
    now = keras_objects()
    return sorted(name for name, obj in stock.items() if now[name] is not obj)


def main(argv):
    del argv
    stock = keras_objects()
    result = {"weights": []}
    for attempt in ("first", "second"):
        with kh.HybridStrategy(timeout_seconds=30) as strategy:
            # Patches go in at first use (the first `scope()`), not before.
            result[f"patched_unused_{attempt}"] = _changed(stock)
            x, y = models.make_data(64)
            with strategy.scope():
                model = models.build_model("sequential", seed=strategy.rank)
                models.compile_model(model, "sgd")
            model.fit(x, y, batch_size=32, epochs=1, verbose=0)
            result["weights"].append(model.get_weights())
            result[f"patched_in_{attempt}"] = _changed(stock)
            result[f"watchdog_in_{attempt}"] = cluster.watchdog() is not None
        result[f"changed_after_{attempt}"] = _changed(stock)
        result[f"watchdog_after_{attempt}"] = cluster.watchdog() is not None
        result[f"closed_{attempt}"] = strategy.closed
    save_result(FLAGS.out_dir, strategy.rank, result)


if __name__ == "__main__":
    app.run(main)

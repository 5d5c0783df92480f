"""Worker: captures every object a strategy may patch, then opens
`--attempts` `HybridStrategy`s one after the other, of whatever kind the
launcher made (one process, multi-worker, elastic; TF or Horovod engine):
each trains and is closed. Saves, per attempt, which objects differed
before the first `scope()`, inside it and after `close()`, and whether
the peer watchdog ran. Even attempts build under `with strategy.scope():`
and close explicitly; odd ones run in `with strategy:`, first `fit` a
model built outside `scope()` (which warns on several workers), then one
built under it."""

import logging
import os
import sys

from absl import app
from absl import flags

import keras_hybrid as kh
from keras_hybrid.strategy import cluster
from keras_hybrid.testing import models
from keras_hybrid.testing.multiprocess import save_result

sys.path.insert(0, os.path.dirname(__file__))
from stock_objects import changed  # noqa: E402
from stock_objects import stock_objects  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("out_dir", None, "Where to save this rank's results.")
flags.DEFINE_integer("attempts", 1, "Strategies opened one after another.")


def _build(strategy):
    model = models.build_model("functional", seed=strategy.rank)
    models.compile_model(model, "adam")
    return model


def _fit(model, x, y):
    model.fit(x, y, batch_size=12, epochs=1, verbose=0)


def _outside_scope_fit(strategy, x, y):
    """The warnings `fit` of a model built outside `scope()` logged."""
    caught = []

    class Catch(logging.Handler):
        def emit(self, record):
            if record.levelno >= logging.WARNING:
                caught.append(record.getMessage())

    handler = Catch()
    logging.getLogger("absl").addHandler(handler)
    try:
        _fit(_build(strategy), x, y)
    finally:
        logging.getLogger("absl").removeHandler(handler)
    return caught


def _inside(stock: dict, strategy, model) -> dict:
    return {
        "inside": changed(stock),
        "watchdog_inside": cluster.watchdog() is not None,
        "weights": model.get_weights(),
        "theirs": model.distribute_strategy is strategy,
    }


def main(argv):
    del argv
    stock = stock_objects()
    attempts = []
    for _ in range(FLAGS.attempts):
        strategy = kh.HybridStrategy(timeout_seconds=60)
        # Patches go in at first use (the first `scope()`), not before.
        attempt = {"size": strategy.size, "unused": changed(stock)}
        x, y = models.make_data(48)
        rank = strategy.rank
        if len(attempts) % 2 == 0:
            with strategy.scope():
                model = _build(strategy)
            _fit(model, x, y)
            attempt.update(_inside(stock, strategy, model))
            strategy.close()
        else:
            with strategy:
                attempt["warned"] = _outside_scope_fit(strategy, x, y)
                with strategy.scope():
                    model = _build(strategy)
                _fit(model, x, y)
                attempt.update(_inside(stock, strategy, model))
        attempt["after"] = changed(stock)
        attempt["watchdog_after"] = cluster.watchdog() is not None
        attempts.append(attempt)
    save_result(FLAGS.out_dir, rank, attempts)


if __name__ == "__main__":
    flags.mark_flag_as_required("out_dir")
    app.run(main)

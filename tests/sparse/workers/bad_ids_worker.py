"""Worker: rank 1 alone looks up an id outside the table; all must stop.

Run by `tests/sparse/test_bad_ids_multiprocess.py` through
`keras-hybrid-run` on 2 workers. One good `fit` step runs first; in the
next global batch only the rows of rank 1's slice hold the bad id
(`--bad_id`). Each rank saves the error it got and whether its weights
(its table shard, the dense layer) changed in the failing step, then
re-raises so the launch fails.
"""

import time

import keras
import numpy as np
import tensorflow as tf
from absl import app
from absl import flags

import keras_hybrid as kh
from keras_hybrid.sparse import sharded_table
from keras_hybrid.testing import SPARSE_TABLES
from keras_hybrid.testing.multiprocess import save_result

FLAGS = flags.FLAGS
flags.DEFINE_string("out_dir", None, "Where to save this rank's results.")
flags.DEFINE_integer("rows", 1000, "Rows V of the embedding table.")
flags.DEFINE_integer("bad_id", 1000, "The id rank 1 looks up.")
flags.DEFINE_float("timeout", 60, "Collective timeout in seconds.")

BATCH, IDS = 8, 3


def make_data(rows, bad_id, size=2):
    """Two global batches; the second has `bad_id` in rank 1's slice."""
    rng = np.random.default_rng(0)
    x = rng.integers(0, rows, (2 * BATCH, IDS)).astype("int32")
    # Worker r gets rows [r * b // size, (r + 1) * b // size) of a batch.
    rank1 = range(BATCH // size, 2 * BATCH // size)
    x[BATCH + rank1[1], 1] = bad_id
    y = rng.normal(size=(2 * BATCH, 1)).astype("float32")
    return x, y


def _local_weights(model):
    """This rank's table shard and dense weights, read without peers."""
    with sharded_table.shard_view():
        return [np.array(tf.convert_to_tensor(v)) for v in model.weights]


def main(argv):
    del argv
    strategy = kh.HybridStrategy(
        timeout_seconds=FLAGS.timeout, variable_kinds=SPARSE_TABLES
    )
    with strategy.scope():
        ids = keras.Input((IDS,), dtype="int32")
        x = keras.layers.Embedding(FLAGS.rows, 4, name="item")(ids)
        x = keras.layers.GlobalAveragePooling1D()(x)
        model = keras.Model(ids, keras.layers.Dense(1)(x))
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    x_data, y_data = make_data(FLAGS.rows, FLAGS.bad_id, strategy.size)
    mine = slice(
        BATCH + strategy.rank * BATCH // strategy.size,
        BATCH + (strategy.rank + 1) * BATCH // strategy.size,
    )
    fit = dict(batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    model.fit(x_data[:BATCH], y_data[:BATCH], **fit)  # a good step
    before = _local_weights(model)
    result = {
        "my_ids_in_bad_batch": x_data[mine].tolist(),
        "error_type": None,
        "message": None,
    }
    start = time.monotonic()
    try:
        model.fit(x_data[BATCH:], y_data[BATCH:], **fit)
    except Exception as e:
        result["error_type"] = type(e).__name__
        result["message"] = str(e)
        result["seconds_to_fail"] = time.monotonic() - start
        after = _local_weights(model)
        result["weights_unchanged"] = [
            bool(np.array_equal(a, b))
            for a, b in zip(before, after, strict=True)
        ]
        save_result(FLAGS.out_dir, strategy.rank, result)
        raise
    save_result(FLAGS.out_dir, strategy.rank, result)


if __name__ == "__main__":
    flags.mark_flags_as_required(["out_dir"])
    app.run(main)

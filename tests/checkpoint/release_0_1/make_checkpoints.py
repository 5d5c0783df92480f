"""Writes the checkpoints that `test_old_checkpoints.py` restores: a
sharded checkpoint and a `.keras` file of a model with a partitioned
table (Adam, so its slots are in the checkpoint), saved by 2 workers.

Uses public API only, so the code of any release runs it:

    keras-hybrid-run -np 2 --threads 1 python make_checkpoints.py --out=DIR

The files beside this script were written by release 0.1.0 (commit
69c352d, before the package's folders were re-laid out).
"""

import os

import keras
import numpy as np
from absl import app
from absl import flags

import keras_hybrid as kh

FLAGS = flags.FLAGS
flags.DEFINE_string("out", None, "Folder to write the checkpoints to.")

VOCAB, DIM, SEQ = 97, 4, 3


def build_model() -> keras.Model:
    ids = keras.Input((SEQ,), dtype="int32", name="ids")
    x = keras.layers.Embedding(VOCAB, DIM, name="table")(ids)
    x = keras.layers.GlobalAveragePooling1D()(x)
    outputs = keras.layers.Dense(2, name="head")(x)
    return keras.Model(ids, outputs)


def data(num: int = 64):
    rng = np.random.default_rng(0)
    ids = rng.integers(0, VOCAB, size=(num, SEQ)).astype("int32")
    y = rng.normal(size=(num, 2)).astype("float32")
    return ids, y


def main(argv):
    del argv
    keras.utils.set_random_seed(1)
    strategy = kh.HybridStrategy(variable_kinds={"table/embeddings": "sparse"})
    with strategy.scope():
        model = build_model()
        model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
    x, y = data()
    model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    path = strategy.save_checkpoint(model, os.path.join(FLAGS.out, "sharded"))
    model.save(os.path.join(FLAGS.out, "model.keras"))
    weights = model.get_weights()
    # Every worker gathers the optimizer's partitioned slots (a collective).
    slots = [np.asarray(v.numpy()) for v in model.optimizer.variables]
    predictions = model.predict(x[:8], verbose=0)
    if strategy.is_chief:
        np.savez(
            os.path.join(FLAGS.out, "expected.npz"),
            predictions=predictions,
            **{f"weight{i}": w for i, w in enumerate(weights)},
            **{f"slot{i}": s for i, s in enumerate(slots)},
        )
        with open(os.path.join(FLAGS.out, "sharded_path.txt"), "w") as f:
            f.write(os.path.relpath(path, FLAGS.out))
    strategy.close()


if __name__ == "__main__":
    flags.mark_flag_as_required("out")
    app.run(main)

"""Worker: restores a release's sharded checkpoint under `HybridStrategy`
and saves the weights and optimizer state it then holds."""

import os
import sys

import keras
import numpy as np
from absl import app
from absl import flags

import keras_hybrid as kh
from keras_hybrid.testing.multiprocess import save_result

sys.path.insert(0, os.path.dirname(__file__))
import make_checkpoints as release  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("out_dir", None, "Where to save this rank's results.")
flags.DEFINE_string("checkpoint", None, "The checkpoint to restore.")


def main(argv):
    del argv
    with kh.HybridStrategy(
        variable_kinds={"table/embeddings": "sparse"}
    ) as strategy:
        with strategy.scope():
            model = release.build_model()
            model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
            model.optimizer.build(model.trainable_variables)
        strategy.restore_checkpoint(model, FLAGS.checkpoint)
        table = model.get_layer("table").embeddings
        result = {
            "weights": model.get_weights(),
            "slots": [np.asarray(v.numpy()) for v in model.optimizer.variables],
            "table_rows": int(table.value.shape[0]),
        }
        save_result(FLAGS.out_dir, strategy.rank, result)


if __name__ == "__main__":
    flags.mark_flags_as_required(["out_dir", "checkpoint"])
    app.run(main)

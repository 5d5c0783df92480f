"""Worker of the version-matrix smoke test: fit, predict, save.

Run on 2 processes by `test_smoke_multiprocess.py` through
`keras-hybrid-run`. The item table is forced sparse with `variable_kinds`,
so it is partitioned whatever the placement rules decide. Every rank saves
its predictions on a probe batch and how many table rows it holds; all
ranks call `model.save` (the chief writes the file).
"""

import os

import keras
import numpy as np
import tensorflow as tf
from absl import app
from absl import flags
from smoke_data import BATCH  # noqa: I001  (beside this script)
from smoke_data import ROWS
from smoke_data import make_data

import keras_hybrid as kh
from keras_hybrid.testing.multiprocess import save_result

FLAGS = flags.FLAGS
flags.DEFINE_string("out_dir", None, "Where to save this rank's results.")
flags.DEFINE_string("model_path", None, "The `.keras` file to write.")

TABLE = "items/embeddings"


def build_model() -> keras.Model:
    ids = keras.Input(shape=(3,), dtype="int32", name="ids")
    rows = keras.layers.Embedding(ROWS, 4, name="items")(ids)
    pooled = keras.layers.GlobalAveragePooling1D()(rows)
    out = keras.layers.Dense(1, name="head")(pooled)
    return keras.Model(ids, out)


def main(argv) -> None:
    del argv
    strategy = kh.HybridStrategy(variable_kinds={TABLE: "sparse"})
    keras.utils.set_random_seed(7)
    with strategy.scope():
        model = build_model()
        model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
    x, y = make_data(BATCH * 4, seed=1)
    history = model.fit(
        x, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0
    )
    probe, _ = make_data(BATCH, seed=2)
    # `predict` returns this rank's rows; put the global batch together.
    predictions = strategy.gather_predictions(
        model.predict(probe, batch_size=BATCH, verbose=0), BATCH
    )
    model.save(FLAGS.model_path)
    table = model.get_layer("items").embeddings.value
    save_result(
        FLAGS.out_dir,
        strategy.rank,
        {
            "tf_version": tf.__version__,
            "keras_version": keras.__version__,
            "losses": history.history["loss"],
            "predictions": np.asarray(predictions),
            "local_table_rows": int(table.shape[0]),
            "table_type": type(table).__name__,
            "file_exists": os.path.exists(FLAGS.model_path),
        },
    )


if __name__ == "__main__":
    flags.mark_flags_as_required(["out_dir", "model_path"])
    app.run(main)

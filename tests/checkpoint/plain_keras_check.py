"""Loads what a 2-worker run exported, in plain Keras, and predicts.

Run as a script by `test_export_multiprocess.py`, in a process that never
imports keras_hybrid. Prints a JSON dict of predictions per format.
"""

import json
import os
import sys

import keras
import numpy as np
import tensorflow as tf

sys.path.insert(
    0, os.path.join(os.path.dirname(__file__), "..", "sparse", "workers")
)
import sparse_cases as cases  # noqa: E402


def main(directory: str) -> None:
    probe = cases.make_data(48, seed=99)[0]
    from_keras = keras.models.load_model(os.path.join(directory, "model.keras"))
    from_weights = cases.build_model("two_tables")
    from_weights.load_weights(os.path.join(directory, "model.weights.h5"))
    served = tf.saved_model.load(os.path.join(directory, "saved_model"))
    out = {
        "keras": from_keras.predict(probe, verbose=0).tolist(),
        "weights_h5": from_weights.predict(probe, verbose=0).tolist(),
        "saved_model": np.asarray(served.serve(probe)).tolist(),
        "optimizer_iterations": int(from_keras.optimizer.iterations.numpy()),
        "keras_hybrid_imported": any(
            m.startswith("keras_hybrid") for m in sys.modules
        ),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])

"""Loads the smoke test's `.keras` file in plain Keras and predicts.

Run as a script by `test_smoke_multiprocess.py`, in a process that never
imports keras_hybrid. Prints a JSON dict on its last line.
"""

import json
import sys

import keras
import numpy as np


def main(model_path: str, probe_path: str) -> None:
    model = keras.models.load_model(model_path)
    probe = np.load(probe_path)
    out = {
        "predictions": model.predict(probe, verbose=0).tolist(),
        "table_shape": list(model.get_layer("items").embeddings.shape),
        "optimizer_iterations": int(model.optimizer.iterations.numpy()),
        "keras_hybrid_imported": any(
            m.startswith("keras_hybrid") for m in sys.modules
        ),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

"""The Keras objects a multi-worker `HybridStrategy` replaces, by name,
for tests that check they are stock again after `close()`."""

import keras
from keras.src import export as export_pkg
from keras.src.backend.tensorflow import trainer as tf_trainer
from keras.src.callbacks import backup_and_restore
from keras.src.callbacks import csv_logger
from keras.src.callbacks import model_checkpoint
from keras.src.callbacks import tensorboard
from keras.src.saving import saving_api
from keras.src.saving import saving_lib

_TRAINER = tf_trainer.TensorFlowTrainer
_CALLBACK_MODULES = (
    backup_and_restore,
    csv_logger,
    model_checkpoint,
    tensorboard,
)
_MODEL_CALLS = (
    "fit",
    "evaluate",
    "predict",
    "predict_on_batch",
    "train_on_batch",
    "test_on_batch",
)


def keras_objects() -> dict:
    """Every object a multi-worker strategy replaces, by name."""
    objects = {
        "save_model": saving_api.save_model,
        "save_weights": saving_api.save_weights,
        "export_saved_model": export_pkg.export_saved_model,
        "H5IOStore.__setitem__": saving_lib.H5IOStore.__dict__["__setitem__"],
        "check_finite": keras.optimizers.LossScaleOptimizer.__dict__[
            "check_finite"
        ],
        "TensorBoard.summary": tensorboard.TensorBoard.__dict__["summary"],
        "TensorBoard._start_profiler": tensorboard.TensorBoard.__dict__[
            "_start_profiler"
        ],
        "Layer.get_weights": keras.layers.Layer.__dict__["get_weights"],
        "SeedGenerator.next": keras.random.SeedGenerator.__dict__["next"],
        "Variable.assign": keras.Variable.__dict__.get("assign"),
        "TensorFlowTrainer._maybe_symbolic_build": _TRAINER.__dict__[
            "_maybe_symbolic_build"
        ],
    }
    for module in _CALLBACK_MODULES:
        objects[f"{module.__name__}.file_utils"] = module.file_utils
    for name in _MODEL_CALLS:
        objects[f"Model.{name}"] = keras.Model.__dict__.get(name)
    return objects

"""Every Keras (and TF) object a multi-worker `HybridStrategy` may replace, read
straight from Keras, by the registry's names (`registry.sites()`): the
list the registry is checked against, kept apart from it."""

import keras
import tensorflow as tf
from keras.src import export as export_pkg
from keras.src.backend.tensorflow import optimizer as tf_optimizer
from keras.src.backend.tensorflow import trainer as tf_trainer
from keras.src.callbacks import backup_and_restore
from keras.src.callbacks import csv_logger
from keras.src.callbacks import model_checkpoint
from keras.src.callbacks import tensorboard
from keras.src.losses import loss as loss_module
from keras.src.optimizers import base_optimizer
from keras.src.saving import saving_api
from keras.src.saving import saving_lib
from keras.src.trainers import trainer as base_trainer
from tensorflow.python.ops import embedding_ops

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
# Replaced only while an elastic strategy is open (`Model.fit` is
# replaced by every multi-worker strategy, and once more by an elastic
# one; Keras' loss scaling and its inverse by every one).
ELASTIC_ONLY = ()


def stock_objects() -> dict:
    """Every object a strategy may replace, by name, as Keras holds it
    now (a class attribute as stored: `None` where it is inherited)."""
    trainer = tf_trainer.TensorFlowTrainer
    objects = {
        "save_model": saving_api.save_model,
        "save_weights": saving_api.save_weights,
        "export_saved_model": export_pkg.export_saved_model,
        "H5IOStore.__setitem__": saving_lib.H5IOStore.__dict__["__setitem__"],
        "LossScaleOptimizer.check_finite": vars(
            keras.optimizers.LossScaleOptimizer
        )["check_finite"],
        "TensorBoard.summary": tensorboard.TensorBoard.__dict__["summary"],
        "TensorBoard.start_profiler": tensorboard.TensorBoard.__dict__[
            "_start_profiler"
        ],
        "Layer.get_weights": keras.layers.Layer.__dict__["get_weights"],
        "SeedGenerator.next": keras.random.SeedGenerator.__dict__["next"],
        "Variable.assign": keras.Variable.__dict__.get("assign"),
        "TensorFlowTrainer._maybe_symbolic_build": trainer.__dict__[
            "_maybe_symbolic_build"
        ],
        "Trainer._compute_loss": base_trainer.Trainer.__dict__["_compute_loss"],
        "scale_loss_for_distribution": loss_module.scale_loss_for_distribution,
        "unscale_loss_for_distribution": (
            loss_module.unscale_loss_for_distribution
        ),
        # `loss_means`.
        "reduce_weighted_values": loss_module.reduce_weighted_values,
    }
    for name in ("__enter__", "__exit__", "gradient"):
        objects[f"GradientTape.{name}"] = vars(tf.GradientTape)[name]
    objects["nn.compute_average_loss"] = tf.nn.compute_average_loss
    objects["Progbar.__init__"] = vars(keras.utils.Progbar)["__init__"]
    for module in _CALLBACK_MODULES:
        short = module.__name__.rsplit(".", 1)[-1]
        objects[f"{short}.file_utils"] = module.file_utils
    for name in _MODEL_CALLS:
        objects[f"Model.{name}"] = keras.Model.__dict__.get(name)
    # `dynamic_compile`: inherited from Keras' `Trainer`.
    objects["Model.compile"] = keras.Model.__dict__.get("compile")
    # `loss_scaling`: inherited from `Trainer`, and `Mean`'s own.
    objects["Model.compute_loss"] = keras.Model.__dict__.get("compute_loss")
    objects["Mean.update_state"] = vars(keras.metrics.Mean)["update_state"]
    # `gradient_clipping`.
    objects["BaseOptimizer._clip_gradients"] = vars(
        base_optimizer.BaseOptimizer
    )["_clip_gradients"]
    objects["TFOptimizer._all_reduce_sum_gradients"] = vars(
        tf_optimizer.TFOptimizer
    )["_all_reduce_sum_gradients"]
    # `tf_lookups`.
    objects["embedding_ops.embedding_lookup"] = embedding_ops.embedding_lookup
    return objects


def changed(stock: dict) -> list[str]:
    """Names whose object is not the one in `stock` now."""
    now = stock_objects()
    return sorted(name for name, obj in stock.items() if now[name] is not obj)

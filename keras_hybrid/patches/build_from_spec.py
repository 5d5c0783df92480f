"""Keras builds a model from the dataset's spec, not from a batch it draws.

Under any `tf.distribute` strategy, Keras' TF trainer
(`_maybe_symbolic_build`) starts `fit`, `evaluate` and `predict` by
drawing one batch from a fresh iterator of the distributed dataset, only
to read its shapes and dtypes, and drops that iterator. A dataset that
can be iterated again (arrays, most `tf.data` pipelines) loses nothing.
One that reads a Python generator or a `keras.utils.PyDataset` does:
Keras' `from_generator` pipeline goes on with the same generator, so the
batches the dropped iterator had pulled ahead never reach training. On 2
workers, whose per-worker slice is a parallel `map` that reads ahead, a
generator's first epoch skipped its 3rd to 5th batches.

While a `HybridStrategy` is in use (one of one process too, which would
otherwise lose batches that plain Keras trains on), the build is given
the dataset's element spec (`tf.TensorSpec`s: shapes and dtypes, all
that Keras reads of the batch) and draws nothing. Where the spec cannot
be read, Keras' own build runs.

Keras' symbolic build also turns every input into a dense symbolic
tensor, so under any `tf.distribute` strategy a model that takes a ragged
input (`keras.Input(ragged=True)`, a layer calling `x.to_tensor()`)
failed with "Unable to automatically build the model". For a dataset
with ragged parts the symbolic build is skipped: the traced step builds
what is left (metrics, loss, optimizer), as in one process.

The symbolic build also calls the model with `training=False`, which
plain Keras never does before the first training step. keras-rs' basic
retrieval model scores its `BruteForceRetrieval` candidates when not
training, and has none until `update_candidates` after `fit`, so the
build failed ("None values not supported") where one plain process
trains. A symbolic build whose call of the model raises is logged and
left to the traced step, as without a strategy; an input that does not
fit the model fails there, with Keras' own error. The layers the failed
call built without creating any state are marked unbuilt again
(keras-rs' `update_candidates` adds its variable to an unbuilt layer
only).
"""

import tensorflow as tf
from absl import logging

from keras_hybrid._compat import keras as keras_compat
from keras_hybrid.patches.patch_set import PRIVATE_KERAS
from keras_hybrid.patches.patch_set import Patch
from keras_hybrid.patches.patch_set import PatchSet


def _build_of(original):
    def build(self, iterator=None, data_batch=None):
        if iterator is not None and data_batch is None:
            spec = keras_compat.epoch_dataset_spec(iterator)
            if spec is not None and any(
                isinstance(s, tf.RaggedTensorSpec)
                for s in tf.nest.flatten(spec)
            ):
                # Keras' symbolic build makes every input dense, so a
                # model that takes a ragged tensor fails in it; such a
                # model is built by its traced step, as in one process.
                return None
            if spec is not None and all(
                isinstance(s, tf.TensorSpec) for s in tf.nest.flatten(spec)
            ):
                return _or_traced_build(self, original, data_batch=spec)
        return _or_traced_build(
            self, original, iterator=iterator, data_batch=data_batch
        )

    return build


def _or_traced_build(model, original, **kwargs):
    """Keras' symbolic build, or none if it raises: the first traced step
    builds the model, as in a plain process (see the module docstring)."""
    try:
        with keras_compat.unbuilt_if_failed(model):
            return original(model, **kwargs)
    except (ValueError, RuntimeError) as error:
        if not _failed_call(error):
            raise
        logging.info(
            "keras-hybrid: Keras' symbolic build of %s failed (%s: %s); "
            "its first traced step builds it, as without a strategy.",
            model.name,
            type(error).__name__,
            str(error).strip().splitlines()[0] if str(error) else "",
        )
        return None


def _failed_call(error) -> bool:
    """Whether `error` is how Keras' symbolic build reports that calling
    the model failed: the call's own `ValueError`, or a `RuntimeError`
    saying it could not build the model. Other errors (an optimizer that
    cannot make its slots) are the build's own and stand."""
    if isinstance(error, ValueError):
        return True
    return "Unable to automatically build the model" in str(error)


PATCHES = PatchSet(
    "build_from_spec",
    one_process=True,
    patches=(
        Patch(
            PRIVATE_KERAS, "TensorFlowTrainer._maybe_symbolic_build", _build_of
        ),
    ),
)

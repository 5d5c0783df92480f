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
"""

import tensorflow as tf

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
                return original(self, data_batch=spec)
        return original(self, iterator=iterator, data_batch=data_batch)

    return build


PATCHES = PatchSet(
    "build_from_spec",
    one_process=True,
    patches=(
        Patch(
            PRIVATE_KERAS, "TensorFlowTrainer._maybe_symbolic_build", _build_of
        ),
    ),
)

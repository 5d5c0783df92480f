"""Makes `predict` return every row, in input order, on every rank.

Keras' TF trainer runs `predict_step` through `strategy.run` on this
worker's slice of each global batch. Worker r holds rows
`[r * b // N, (r + 1) * b // N)` of a global batch of b rows
(`input_sharding`), so all-gathering each step's outputs in rank order
rebuilds the global batch in input order. The gather is traced into the
predict function, after the step, while `gathering()` is on: the patched
`Model.predict` and `predict_on_batch` (`patches.collective_calls`) turn
it on, so a user's `predict_step` override is gathered too.
`predict_on_batch` feeds its batch to the predict function undistributed,
so each worker first keeps its slice (`local_slice`): the function Keras
caches for both calls then always gathers.
"""

import tensorflow as tf

from keras_hybrid.utils.thread_flag import ThreadFlag

_gathering = ThreadFlag()


def gathering():
    """Within, steps run through the strategy gather their outputs."""
    return _gathering.scope()


def gather_outputs(outputs, communicator):
    """Every worker's rows of `outputs` (any nest of tensors), in rank
    order, if `gathering()` is on; else `outputs` unchanged.

    Raises:
        NotImplementedError: For an output that is not a dense tensor
            (ragged or sparse).
    """
    if not _gathering or communicator.size == 1:
        return outputs
    return tf.nest.map_structure(lambda t: _gather(t, communicator), outputs)


def local_slice(batch, rank: int, size: int):
    """This worker's rows of a global `batch` (any nest of arrays or
    tensors with the same number of rows), as `input_sharding` slices."""
    leaves = [t for t in tf.nest.flatten(batch) if t is not None]
    if size == 1 or not leaves:
        return batch
    rows = int(leaves[0].shape[0])
    start, stop = rank * rows // size, (rank + 1) * rows // size
    return tf.nest.map_structure(
        lambda t: None if t is None else t[start:stop], batch
    )


def _gather(value, communicator):
    if value is None:
        return None
    if isinstance(value, (tf.RaggedTensor, tf.SparseTensor)):
        raise NotImplementedError(
            "`predict` under HybridStrategy gathers every worker's rows of "
            "dense outputs only. Received an output of type "
            f"{type(value).__name__}. Return a dense tensor from the model "
            "(e.g. `ragged.to_tensor()`)."
        )
    gathered, _ = communicator.all_gather(value, path="control")
    return gathered

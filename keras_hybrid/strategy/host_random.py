"""Every worker takes rank 0's Python and NumPy random states.

Keras shuffles a `keras.utils.PyDataset`'s batches with Python's `random`
(`random.shuffle` at each epoch). Without a seed, or with any draw that
differs between processes, each worker would shuffle differently: a
"global batch" would be N slices of N different batches, silently. A
strategy gives every worker rank 0's TF global seed (Keras shuffles arrays
with TF ops); when it starts, it also copies rank 0's Python `random`
state and NumPy's global state to the other workers, so code that draws
from them alike on every rank (Keras, a `PyDataset` that augments with
`np.random`) draws alike. Rank 0's own states are unchanged, so a seeded
script's rank 0 draws what one process draws.
"""

import random

import numpy as np
import tensorflow as tf


def share_from_rank0(communicator) -> None:
    """Sets this worker's Python and NumPy random states to rank 0's."""
    ints, floats = _pack()
    ints = communicator.broadcast(tf.constant(ints, tf.int64), root=0)
    floats = communicator.broadcast(tf.constant(floats, tf.float64), root=0)
    if communicator.rank != 0:
        _unpack(ints.numpy().tolist(), floats.numpy().tolist())


def _pack() -> tuple[list, list]:
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    if version != 3 or name != "MT19937":
        raise NotImplementedError(
            f"Unknown random state layout: Python {version}, NumPy {name}."
        )
    ints = [*internal, *keys.tolist(), pos, has_gauss, gauss is not None]
    return ints, [0.0 if gauss is None else gauss, cached]


def _unpack(ints: list, floats: list) -> None:
    internal, rest = ints[:625], ints[625:]
    keys, (pos, has_gauss, has_python_gauss) = rest[:624], rest[624:]
    python_gauss = floats[0] if has_python_gauss else None
    random.setstate((3, tuple(internal), python_gauss))
    np.random.set_state(
        ("MT19937", np.array(keys, np.uint32), pos, has_gauss, floats[1])
    )

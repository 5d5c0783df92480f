"""Every worker takes rank 0's random seeds and states.

Keras shuffles a `keras.utils.PyDataset`'s batches with Python's `random`
(`random.shuffle` at each epoch). Without a seed, or with any draw that
differs between processes, each worker would shuffle differently: a
"global batch" would be N slices of N different batches, silently. A
strategy gives every worker rank 0's TF global seed (Keras shuffles arrays
with TF ops): the script's, or if it set none, the one TensorFlow gives an
op that names its own seed (`global_seed`), so that `shuffle(n, seed=1)`
orders as in one process. When it starts, it also copies rank 0's Python
`random` state and NumPy's global state to the other workers, so code that
draws from them alike on every rank (Keras, a `PyDataset` that augments
with `np.random`) draws alike. Rank 0's own states are unchanged, so a seeded
script's rank 0 draws what one process draws.
"""

import random

import numpy as np
import tensorflow as tf


def global_seed() -> int:
    """The TF global seed that seeded ops use now: the script's
    (`tf.random.set_seed`), or with none set, TensorFlow's default for an
    op that names its own seed. Draws no op seed (unlike
    `get_seed(None)`, which advances the eager op-seed stream).

    With it set on every worker, an op that names its seed draws what it
    draws in one process, and an op that names none draws alike on every
    worker (the same on every run, where one unseeded process differs).
    """
    seed, _ = tf.compat.v1.random.get_seed(0)
    return int(seed)


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

"""The model and data of the simulator's traffic tests (no flags).

Imported by `traffic_scenarios.py` (beside it) and by the tests, so both
build the same model and draw the same ids.
"""

import keras
import numpy as np

VOCAB, DIM, SEQ_LEN, CLASSES = 3000, 16, 16, 4
SEQS_PER_WORKER = 16
ZIPF = 1.2


def make_data(num_seqs: int, seed: int = 0):
    """Zipf token ids in [0, VOCAB) and labels, the same on every worker."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, VOCAB + 1, dtype=np.float64) ** ZIPF
    ids = rng.choice(VOCAB, size=(num_seqs, SEQ_LEN), p=p / p.sum())
    labels = rng.integers(0, CLASSES, size=num_seqs)
    return ids.astype(np.int64), labels.astype(np.int32)


def build_model() -> keras.Model:
    return _model(keras.layers.Embedding(VOCAB, DIM, name="tokens"))


def _model(table: keras.layers.Layer) -> keras.Model:
    """The traffic tests' model around its table layer `table`."""
    model = keras.Sequential(
        [
            keras.Input((SEQ_LEN,), dtype="int64"),
            table,
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(CLASSES),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.SGD(0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


# Token id -> a key spread over the int64 range (a bijection: odd
# multiplier modulo 2^63), as a hashed feature would be.
_KEY_MULTIPLIER = 0x9E3779B97F4A7C15 % 2**63 | 1


def to_keys(ids) -> np.ndarray:
    """Keys of the `DynamicEmbedding` model for token `ids`."""
    ids = np.asarray(ids).astype(object)
    return ((ids * _KEY_MULTIPLIER) % 2**63).astype(np.int64)


def build_dynamic_model() -> keras.Model:
    """`build_model` with a `DynamicEmbedding` of keys (`to_keys`) in
    place of the `Embedding`; keys admitted at their second lookup."""
    import keras_hybrid as kh

    return _model(
        kh.layers.DynamicEmbedding(
            DIM, capacity=VOCAB, admit_after=2, name="tokens"
        )
    )


def worker_slices(ids, size: int, global_batch: int):
    """`[step][worker]` ids: worker i gets rows `[i b / N, (i + 1) b / N)`
    of each global batch of `b` (HybridStrategy's input sharding)."""
    steps = ids.shape[0] // global_batch
    return [
        [
            ids[s * global_batch :][
                i * global_batch // size : (i + 1) * global_batch // size
            ]
            for i in range(size)
        ]
        for s in range(steps)
    ]

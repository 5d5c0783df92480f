"""A small attention seq2seq translator, trained with `fit`.

Source and target embeddings (both partitioned over the workers), an LSTM
encoder, an LSTM decoder started from the encoder's state, dot-product
attention over the encoder outputs, and a softmax over the target
vocabulary. Lines marked `# keras_hybrid:` are all that distribution adds.
"""

import dataclasses

import keras
import numpy as np
from absl import logging

import keras_hybrid  # keras_hybrid:

# Run as a script (`python examples/nmt/main.py`, or from a copy of this
# folder) its siblings are top-level modules; as `examples.nmt.train`,
# modules of the package.
if __package__:
    from . import training
else:
    import training

PAD, BOS, UNK = 0, 1, 2  # reserved ids on both sides
RESERVED = ("<pad>", "<bos>", "<unk>")


def build_model(src_vocab: int, tgt_vocab: int, dim: int, hidden: int):
    """Source ids and shifted target ids in, target logits out."""
    source = keras.Input((None,), dtype="int32", name="source")
    previous = keras.Input((None,), dtype="int32", name="previous")
    x = keras.layers.Embedding(src_vocab, dim, name="source_embedding")(source)
    encoded, h, c = keras.layers.LSTM(
        hidden, return_sequences=True, return_state=True, name="encoder"
    )(x)
    y = keras.layers.Embedding(tgt_vocab, dim, name="target_embedding")(
        previous
    )
    decoded = keras.layers.LSTM(hidden, return_sequences=True, name="decoder")(
        y, initial_state=[h, c]
    )
    context = keras.layers.Attention(name="attention")([decoded, encoded])
    x = keras.layers.Concatenate()([decoded, context])
    x = keras.layers.Dense(hidden, activation="tanh", name="combine")(x)
    logits = keras.layers.Dense(tgt_vocab, name="logits")(x)
    return keras.Model({"source": source, "previous": previous}, logits)


def synthetic_pairs(num: int, vocab: int, seq_len: int, seed: int):
    """Zipf-distributed source sentences; each target is the source
    translated word by word through a fixed random dictionary, reversed."""
    rng = np.random.default_rng(seed)
    source = len(RESERVED) + training.zipf_ids(
        rng, vocab - len(RESERVED), (num, seq_len)
    )
    dictionary = np.arange(vocab)
    dictionary[len(RESERVED) :] = len(RESERVED) + rng.permutation(
        vocab - len(RESERVED)
    )
    return source, dictionary[source][:, ::-1]


def _ids(sentences: list[list[str]], vocab: int, seq_len: int):
    counts: dict[str, int] = {}
    for words in sentences:
        for w in words:
            counts[w] = counts.get(w, 0) + 1
    ranked = sorted(counts, key=lambda w: -counts[w])[: vocab - len(RESERVED)]
    index = {w: i + len(RESERVED) for i, w in enumerate(ranked)}
    out = np.full((len(sentences), seq_len), PAD, np.int64)
    for row, words in enumerate(sentences):
        ids = [index.get(w, UNK) for w in words[:seq_len]]
        out[row, : len(ids)] = ids
    return out


def read_pairs(path: str, vocab: int, seq_len: int):
    """`source<TAB>target` lines as padded id arrays, words split on white
    space; each side keeps its `vocab - 3` most frequent words."""
    src, tgt = [], []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 2:
                raise ValueError(
                    f"Each line of --data must be `source<TAB>target`. "
                    f"Received {len(parts)} fields on line {number} of "
                    f"{path}."
                )
            src.append(parts[0].split())
            tgt.append(parts[1].split())
    return _ids(src, vocab, seq_len), _ids(tgt, vocab, seq_len)


def teacher_forcing(source, target):
    """Model inputs (the target shifted right after `<bos>`) and labels."""
    previous = np.concatenate(
        [np.full((len(target), 1), BOS), target[:, :-1]], axis=1
    )
    inputs = {"source": source.astype("int32"), "previous": previous}
    return inputs, target.astype("int32")


@dataclasses.dataclass(frozen=True)
class Config(training.CommonConfig):
    """Everything `train` takes: `main.py` builds it from its flags."""

    vocab: int = 5_000
    seq_len: int = 12
    dim: int = 64
    hidden: int = 128
    learning_rate: float = 0.005


def train(config: Config) -> dict:
    """Trains the translator.

    Returns:
        Dict with `loss`, `accuracy`, `val_loss` and `val_accuracy` per
        epoch (token level, held-out last 10% of the pairs), `workers` and
        `chief` (whether this process is rank 0).
    """
    steps, batch_size, epochs = config.steps, config.batch_size, config.epochs
    data, vocab, seq_len = config.data, config.vocab, config.seq_len
    dim, hidden, learning_rate = config.dim, config.hidden, config.learning_rate
    seed, model_dir, log_dir = config.seed, config.model_dir, config.log_dir
    step_log = config.step_log
    keras.utils.set_random_seed(seed)
    strategy = keras_hybrid.HybridStrategy()  # keras_hybrid:
    if data:
        source, target = read_pairs(data, vocab, seq_len)
    else:
        num = int(steps * batch_size / 0.9) + 1
        source, target = synthetic_pairs(num, vocab, seq_len, seed)
    split = int(0.9 * len(source))
    if steps:
        split = min(split, steps * batch_size)
    x, y = teacher_forcing(source[:split], target[:split])
    val = teacher_forcing(source[split:], target[split:])
    with strategy.scope():  # keras_hybrid:
        model = build_model(vocab, vocab, dim, hidden)
        model.compile(
            optimizer=keras.optimizers.Adam(learning_rate),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    writes = strategy.is_chief  # keras_hybrid: rank 0 writes the logs
    history = model.fit(
        x,
        y,
        batch_size=batch_size,
        epochs=epochs,
        validation_data=val,
        callbacks=training.callbacks(model_dir, log_dir, step_log, writes),
    ).history
    if strategy.is_chief:  # keras_hybrid: one rank reports
        # Placement is final once a step was traced: kind, reason, bytes.
        logging.info("Routing plan:\n%s", strategy.plan)
    keys = ("loss", "accuracy", "val_loss", "val_accuracy")
    out = {k: history.get(k, []) for k in keys}
    out.update(workers=strategy.size, chief=strategy.is_chief)  # keras_hybrid:
    return out

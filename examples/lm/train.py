"""A word-level language model in the shape of LM1B, trained with `fit`.

Input embedding -> LSTM -> sampled softmax over the vocabulary. Both big
tables, the input embedding and the softmax weights, are partitioned over
the workers; the LSTM is replicated. Lines marked `# keras_hybrid:` are all
that distribution adds.
"""

import collections
import dataclasses
import math

import keras
import numpy as np
import tensorflow as tf
from absl import logging
from keras import ops

import keras_hybrid  # keras_hybrid:

# Run as a script (`python examples/lm/main.py`, or from a copy of this
# folder) its siblings are top-level modules; as `examples.lm.train`,
# modules of the package.
if __package__:
    from . import training
else:
    import training

UNK = "<unk>"
EOS = "<eos>"
# keras_hybrid: the softmax table is a custom layer's weight, read only by
# id, so it can be partitioned like an Embedding table.
SOFTMAX_KINDS = {  # keras_hybrid:
    "softmax/weights": "sparse",  # keras_hybrid:
    "softmax/biases": "sparse",  # keras_hybrid:
}  # keras_hybrid:


class SampledSoftmax(keras.layers.Layer):
    """Per-token loss of a sampled softmax; the full softmax at evaluation.

    Training uses `tf.nn.sampled_softmax_loss` with candidates from the
    log-uniform (Zipf) sampler, which suits ids sorted by frequency. It
    reads only the true and sampled rows of `weights` and `biases`.
    Evaluation computes the exact softmax by gathering every row, so it is
    for vocabularies that fit one worker's memory.

    Args:
        vocab: Int. Number of classes (rows of the table).
        num_sampled: Int. Negative classes sampled per step.
    """

    def __init__(self, vocab: int, num_sampled: int, **kwargs):
        super().__init__(**kwargs)
        self.vocab = vocab
        self.num_sampled = num_sampled

    def build(self, input_shape):
        hidden_shape, _ = input_shape
        self.weights_ = self.add_weight(
            (self.vocab, hidden_shape[-1]), "glorot_uniform", name="weights"
        )
        self.biases = self.add_weight((self.vocab,), "zeros", name="biases")

    def call(self, inputs, training=False):
        hidden, targets = inputs
        dim = ops.shape(hidden)[-1]
        flat = ops.reshape(hidden, (-1, dim))
        labels = ops.reshape(ops.cast(targets, "int64"), (-1, 1))
        if training:
            # tf.nn's lookups need the tf.Variable, not the keras.Variable.
            loss = tf.nn.sampled_softmax_loss(
                weights=self.weights_.value,
                biases=self.biases.value,
                labels=labels,
                inputs=flat,
                num_sampled=self.num_sampled,
                num_classes=self.vocab,
            )
        else:
            every_id = ops.arange(self.vocab)
            logits = ops.matmul(
                flat, ops.transpose(ops.take(self.weights_, every_id, axis=0))
            ) + ops.take(self.biases, every_id, axis=0)
            loss = keras.losses.sparse_categorical_crossentropy(
                labels, logits, from_logits=True
            )
        return ops.reshape(loss, ops.shape(targets))

    def get_config(self):
        return {
            **super().get_config(),
            "vocab": self.vocab,
            "num_sampled": self.num_sampled,
        }


def build_model(
    vocab: int, seq_len: int, dim: int, hidden: int, num_sampled: int
):
    """Tokens and next tokens in, the loss of each token out."""
    tokens = keras.Input((seq_len,), dtype="int32", name="tokens")
    targets = keras.Input((seq_len,), dtype="int32", name="targets")
    x = keras.layers.Embedding(vocab, dim, name="embedding")(tokens)
    x = keras.layers.LSTM(hidden, return_sequences=True, name="lstm")(x)
    x = keras.layers.Dense(dim, name="projection")(x)
    loss = SampledSoftmax(vocab, num_sampled, name="softmax")([x, targets])
    return keras.Model({"tokens": tokens, "targets": targets}, loss)


def token_loss(y_true, y_pred):
    """The model already outputs each token's loss; average per sequence.

    Per sequence, not one scalar: Keras (3.15) scales a loss by
    `1 / num_replicas_in_sync` only if it has a batch axis, so a scalar
    loss would be summed, not averaged, over the workers.
    """
    del y_true
    return ops.mean(y_pred, axis=-1)


def synthetic_stream(num_tokens: int, vocab: int, seed: int) -> np.ndarray:
    """A Zipf-distributed token stream with structure an LSTM can learn.

    Each token is a Zipf(1.1) draw shifted by an amount chosen by the
    previous token, so the next token depends on the last one.
    """
    rng = np.random.default_rng(seed)
    draws = training.zipf_ids(rng, vocab, num_tokens)
    shift = rng.integers(0, 4, size=vocab) * (vocab // 4)
    stream = np.empty(num_tokens, np.int64)
    stream[0] = draws[0]
    for i in range(1, num_tokens):
        stream[i] = (draws[i] + shift[stream[i - 1]]) % vocab
    return stream


def read_text(path: str, vocab: int) -> tuple[np.ndarray, list[str]]:
    """A plain text file as ids of its `vocab` most frequent words.

    Words are split on white space, lines end with `<eos>`; id 0 is
    `<unk>` and the others are sorted by frequency, as the log-uniform
    sampler expects.
    """
    with open(path, encoding="utf-8") as f:
        lines = [line.split() + [EOS] for line in f if line.strip()]
    counts = collections.Counter(w for line in lines for w in line)
    words = [UNK] + [w for w, _ in counts.most_common(vocab - 1)]
    index = {w: i for i, w in enumerate(words)}
    ids = [index.get(w, 0) for line in lines for w in line]
    return np.asarray(ids, np.int64), words


def windows(stream: np.ndarray, seq_len: int, count: int):
    """`count` consecutive (tokens, next tokens) windows of the stream."""
    usable = (len(stream) - 1) // seq_len
    if count > usable or usable == 0:
        raise ValueError(
            f"The token stream has {len(stream)} tokens: too few for "
            f"{count} windows of {seq_len}. Use a larger --data file or "
            "fewer --steps."
        )
    count = count or usable
    ends = count * seq_len
    x = stream[:ends].reshape(count, seq_len).astype("int32")
    y = stream[1 : ends + 1].reshape(count, seq_len).astype("int32")
    return {"tokens": x, "targets": y}, np.zeros((count, 1), "float32")


@dataclasses.dataclass(frozen=True)
class Config(training.CommonConfig):
    """Everything `train` takes: `main.py` builds it from its flags."""

    vocab: int = 10_000
    seq_len: int = 20
    dim: int = 64
    hidden: int = 128
    num_sampled: int = 64
    learning_rate: float = 0.01


def train(config: Config) -> dict:
    """Trains the LM; returns per-epoch loss and perplexity.

    Returns:
        Dict with, per epoch, `loss` (training, sampled softmax),
        `val_loss` and `val_perplexity` (the held-out last 10% of the
        stream, full softmax); and `workers`, `chief` (whether this
        process is rank 0) and `vocab`.
    """
    steps, batch_size, epochs = config.steps, config.batch_size, config.epochs
    data, vocab, seq_len = config.data, config.vocab, config.seq_len
    dim, hidden, num_sampled = config.dim, config.hidden, config.num_sampled
    learning_rate, seed = config.learning_rate, config.seed
    model_dir, log_dir = config.model_dir, config.log_dir
    step_log = config.step_log
    keras.utils.set_random_seed(seed)
    strategy = keras_hybrid.HybridStrategy(  # keras_hybrid:
        variable_kinds=SOFTMAX_KINDS  # keras_hybrid:
    )  # keras_hybrid:
    if data:
        stream, words = read_text(data, vocab)
        vocab = len(words)
    else:
        # 90% for training (steps * batch_size windows), 10% held out.
        num_tokens = int(steps * batch_size * seq_len / 0.9) + 2 * seq_len
        stream = synthetic_stream(num_tokens, vocab, seed)
    split = int(0.9 * len(stream))
    x, y = windows(stream[:split], seq_len, steps * batch_size)
    val_x, val_y = windows(stream[split:], seq_len, 0)
    with strategy.scope():  # keras_hybrid:
        model = build_model(vocab, seq_len, dim, hidden, num_sampled)
        model.compile(
            optimizer=keras.optimizers.Adam(learning_rate), loss=token_loss
        )
    writes = strategy.is_chief  # keras_hybrid: rank 0 writes the logs
    history = model.fit(
        x,
        y,
        batch_size=batch_size,
        epochs=epochs,
        validation_data=(val_x, val_y),
        callbacks=training.callbacks(model_dir, log_dir, step_log, writes),
    ).history
    if strategy.is_chief:  # keras_hybrid: one rank reports
        # Placement is final once a step was traced: kind, reason, bytes.
        logging.info("Routing plan:\n%s", strategy.plan)
    out = {k: history.get(k, []) for k in ("loss", "val_loss")}
    out["val_perplexity"] = [math.exp(v) for v in out["val_loss"]]
    out.update(vocab=vocab)
    out.update(workers=strategy.size, chief=strategy.is_chief)  # keras_hybrid:
    return out

"""Profiles of the Parallax paper's LM and NMT, built from model sizes.

Kim et al., "Parallax: Sparsity-aware Data Parallel Training of Deep
Neural Networks", EuroSys 2019, train an LSTM language model on the One
Billion Word benchmark (LM) and GNMT on WMT16 German-English (NMT) on 8
hosts of 6 GPUs (100 Gbit/s InfiniBand). Nothing here is measured on
this machine: variables and lookups follow the model definitions the
authors published with Parallax (github.com/snuspl/parallax,
`examples/lm1b` and `examples/nmt`), and unique ids follow a Zipf law
(see `zipf_unique`). Compute time is not modeled (0 s): predictions of
these profiles are communication only.

LM (`examples/lm1b`: `language_model.py`, `lm1b_distributed_driver.py`,
`language_model_graph.py`): vocabulary 793 470, embedding 512, an LSTM of
2048 cells projected to 512 (the 2048/512 model of Jozefowicz et al.
that the example cites; the code in the repository has 128 cells,
which gives 0.6 M dense parameters where the paper's 9.4 M needs 2048),
128 sequences of 20 tokens per GPU, sampled softmax with batch x steps =
2 560 negatives, Adagrad. Tables: the input embedding, the softmax
weights and the softmax biases (813.3 M parameters); dense: the LSTM's
kernel, bias and projection (9.4 M).

NMT (`examples/nmt`, README command `wmt16_gnmt_4_layer.json`): GNMT with
4 layers of 1024 LSTM cells (one bidirectional encoder layer), normed
Bahdanau attention (`gnmt_v2`), separate source and target vocabularies
of 36 548 BPE tokens (WMT16 `vocab.bpe.32000`), embedding 1024, 128
sentence pairs per GPU. Tables: the two embeddings (74.9 M); dense: the
LSTMs, the attention and the output projection (a full softmax, dense).
Sentence length is not in the hyper-parameters (`src_max_len` 50 caps
it): `NMT_TOKENS` per sentence is an assumption, stated with the figures.
"""

import functools

import numpy as np

from keras_hybrid.costs.profile import Profile
from keras_hybrid.costs.profile import VariableStats

LM_VOCAB = 793_470
LM_EMBED = 512
LM_CELLS = 2048
LM_BATCH = 128
LM_STEPS = 20
NMT_VOCAB = 36_548
NMT_UNITS = 1024
NMT_LAYERS = 4
NMT_BATCH = 128
# Assumed mean tokens of a WMT16 BPE sentence (capped at 50 by the
# example's `src_max_len`/`tgt_max_len`).
NMT_TOKENS = 30
# Exponent of word (and BPE token) frequencies: Zipf's law, s = 1.
ZIPF = 1.0
# Hosts and GPUs of the paper's cluster.
HOSTS, GPUS_PER_HOST = 8, 6


@functools.lru_cache(maxsize=32)
def zipf_unique(rows: int, lookups: int, zipf: float = ZIPF) -> float:
    """Expected distinct ids among `lookups` Zipf(`zipf`) draws over
    `rows` ids: `sum_k 1 - (1 - p_k)**n`."""
    p = 1.0 / np.arange(1, rows + 1, dtype=np.float64) ** zipf
    p /= p.sum()
    return float(-np.expm1(lookups * np.log1p(-p)).sum())


def _lstm(inputs: int, cells: int) -> list:
    return [(inputs + cells, 4 * cells), (4 * cells,)]


def _dense(name: str, shapes) -> list:
    return [
        VariableStats(f"{name}/{i}", "dense", tuple(s), 4)
        for i, s in enumerate(shapes)
    ]


def _table(path, rows, dim, calls, batches) -> VariableStats:
    """A table; `calls` maps lookups per sample to a function of the batch
    giving unique ids."""
    return VariableStats(
        path,
        "sparse",
        (rows, dim) if dim > 1 else (rows,),
        4,
        8,
        tuple(per_sample for per_sample, _ in calls),
        tuple(batches),
        tuple(tuple(unique(b) for b in batches) for _, unique in calls),
    )


def lm_profile() -> Profile:
    """The paper's LM (see the module doc), per GPU."""
    tokens = LM_STEPS
    batches = (LM_BATCH, LM_BATCH * GPUS_PER_HOST)

    def inputs(b):
        return zipf_unique(LM_VOCAB, tokens * b)

    def softmax(b):
        # Targets, and the sampled negatives: 2 560 distinct ids per GPU
        # (TF's sampler draws without repetition); merged over a host's
        # GPUs they are counted as log-uniform (Zipf 1) draws.
        negatives = LM_BATCH * LM_STEPS
        merged = (
            negatives
            if b == LM_BATCH
            else zipf_unique(LM_VOCAB, negatives * b // LM_BATCH)
        )
        return min(LM_VOCAB, zipf_unique(LM_VOCAB, tokens * b) + merged)

    # One lookup per step of the softmax variables: targets and negatives
    # together (`sampled_softmax_loss` concatenates them). The LSTM reads
    # the embedding and its projected state.
    variables = [
        _table("lm/emb", LM_VOCAB, LM_EMBED, [(tokens, inputs)], batches),
        *_dense(
            "lm/lstm",
            [
                (LM_EMBED + LM_EMBED, 4 * LM_CELLS),
                (4 * LM_CELLS,),
                (LM_CELLS, LM_EMBED),
            ],
        ),
        _table(
            "lm/softmax_w",
            LM_VOCAB,
            LM_EMBED,
            [(2 * tokens, softmax)],
            batches,
        ),
        _table("lm/softmax_b", LM_VOCAB, 1, [(2 * tokens, softmax)], batches),
    ]
    return Profile("parallax-lm", tuple(variables), (LM_BATCH,), (0.0,))


def nmt_dense_shapes(
    units: int = NMT_UNITS, layers: int = NMT_LAYERS, vocab: int = NMT_VOCAB
) -> list:
    """Shapes of GNMT's dense variables (`gnmt` encoder, `gnmt_v2`
    decoder, normed Bahdanau attention, output projection)."""
    shapes = []
    # Encoder: one bidirectional layer, then layers - 1 unidirectional
    # ones, the first of which reads both directions.
    shapes += 2 * _lstm(units, units)
    shapes += _lstm(2 * units, units)
    for _ in range(layers - 2):
        shapes += _lstm(units, units)
    # Decoder: every layer reads its input and the attention context.
    for _ in range(layers):
        shapes += _lstm(2 * units, units)
    # Attention: memory and query layers, v, the norm's g and b.
    shapes += [(units, units), (units, units), (units,), (), (units,)]
    shapes.append((units, vocab))
    return shapes


def nmt_profile(tokens: int = NMT_TOKENS) -> Profile:
    """The paper's NMT (see the module doc), per GPU."""
    batches = (NMT_BATCH, NMT_BATCH * GPUS_PER_HOST)

    def unique(b):
        return zipf_unique(NMT_VOCAB, tokens * b)

    variables = [
        _table(
            "nmt/src_emb", NMT_VOCAB, NMT_UNITS, [(tokens, unique)], batches
        ),
        _table(
            "nmt/tgt_emb", NMT_VOCAB, NMT_UNITS, [(tokens, unique)], batches
        ),
        *_dense("nmt/dense", nmt_dense_shapes()),
    ]
    return Profile("parallax-nmt", tuple(variables), (NMT_BATCH,), (0.0,))


PROFILES = {"lm": lm_profile, "nmt": nmt_profile}

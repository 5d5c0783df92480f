"""The stock-Horovod vs hybrid example on 2 workers, with tiny flags.

Byte counts are checked by hand: stock Horovod all-gathers every lookup's
gradient row and id (no dedupe), hybrid moves each unique remote id's row
once per direction, and both sum the same Dense gradients.
"""

import json
import os
import tempfile

import numpy as np
import pytest

from keras_hybrid.testing import run_workers

pytestmark = pytest.mark.multiprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
SCRIPT = os.path.join(ROOT, "examples", "horovod_comparison", "main.py")
VOCAB, DIM, SEQS, SEQ_LEN, HIDDEN, CLASSES = 512, 8, 8, 8, 64, 8
BIG_VOCAB = 100_000
TINY = (
    f"--vocab={VOCAB}",
    f"--dim={DIM}",
    f"--seqs_per_worker={SEQS}",
    f"--seq_len={SEQ_LEN}",
    "--warmup_steps=1",
    "--steps=3",
    "--rounds=2",
)


def _run(placement: str, *extra: str) -> dict:
    out_dir = tempfile.mkdtemp(prefix=f"hvd_comparison_{placement}_")
    args = (*TINY, f"--placement={placement}", *extra)
    run = run_workers(
        SCRIPT, 2, out_dir, args=args, timeout=240, engine="horovod"
    ).check()
    assert "HOROVOD_COMPARISON_JSON" in run.stdout, run.stdout[-3000:]
    with open(os.path.join(out_dir, "horovod_comparison.json")) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def figures():
    """The table partitioned whatever the cost rule says."""
    return _run("partitioned")


@pytest.fixture(scope="module")
def replicated_figures():
    """The table replicated (on 2 workers the cost rule's choice is a near
    tie that these tiny flags can tip either way). So big that its
    gradient is gathered: a 512-row one is cheaper densified into the
    dense all-reduce."""
    return _run("replicated", f"--vocab={BIG_VOCAB}")


def test_horovod_stock_all_gathers_every_lookup(figures):
    sent = figures["stock"]["bytes_per_step"]
    lookups = SEQS * SEQ_LEN  # per worker and step, duplicates included
    assert sent["sparse_push"] == lookups * DIM * 4  # (N - 1) = 1 peer
    assert sent["ids"] == lookups * 4  # int32 ids
    assert sent["sparse_pull"] == 0


def test_horovod_both_modes_sum_the_same_dense_gradients(figures):
    dense_bytes = 4 * (DIM * HIDDEN + HIDDEN + HIDDEN * CLASSES + CLASSES)
    # 2 (N - 1) / N = 1 for N = 2.
    assert figures["stock"]["bytes_per_step"]["dense"] == dense_bytes
    assert figures["hybrid"]["bytes_per_step"]["dense"] == dense_bytes


def test_horovod_hybrid_moves_fewer_sparse_bytes_than_stock(figures):
    hybrid = figures["hybrid"]["bytes_per_step"]
    stock = figures["stock"]["bytes_per_step"]
    # A worker pushes one gradient row per unique id another worker owns:
    # with Zipf ids over 512 rows, far fewer than its 64 lookups (about
    # half of which are its own rows).
    assert 0 < hybrid["sparse_push"] < 0.5 * stock["sparse_push"]
    assert 0 < hybrid["sparse_pull"] < 0.5 * stock["sparse_push"]
    assert figures["hybrid_over_stock"]["bytes_per_step"] < 1
    for mode in ("stock", "hybrid"):
        assert figures[mode]["samples_per_s"] > 0
        # Timed in alternating rounds; the figure is their median.
        assert len(figures[mode]["samples_per_s_per_round"]) == 2
    assert len(figures["hybrid_over_stock"]["samples_per_s_per_round"]) == 2


def test_horovod_stock_and_hybrid_train_the_same_weights(figures):
    assert figures["max_weight_change"] > 1e-3, "no training"
    assert np.isfinite(figures["max_weight_difference"])
    assert figures["max_weight_difference"] < 1e-5


def test_horovod_hybrid_step_has_no_separate_count_exchange(figures):
    calls = figures["hybrid"]["collectives_per_step"]
    # Per step: one id all-to-all that carries the counts and bad-id
    # flags in its blocks' headers (no control all-to-all before it), one
    # pull, one push, one fused dense all-reduce, one all-reduce of the
    # metric state and one of the global batch's rows (each worker's loss
    # counts by its share of it). Each timed round (one `fit` of 3 steps) adds 3
    # control calls: the `fit` fence and the epoch-end global reads of
    # the loss metric's `total` and `count`.
    per_round = 3 / 3
    assert calls["ids"] == 1
    assert calls["sparse_pull"] == calls["sparse_push"] == 1
    assert calls["dense"] == 1
    assert calls["control"] == pytest.approx(2 + per_round)
    # The headers are charged to `control` all the same: P part counts
    # and a flag, int64, to the one peer.
    assert figures["hybrid"]["bytes_per_step"]["control"] >= 2 * 8


def test_horovod_hybrid_gathers_one_row_per_distinct_id(replicated_figures):
    # A replicated table's IndexedSlices gradient: each worker
    # sums its gradient rows per id before the all-gather, so it sends
    # its distinct ids' rows (Zipf(1.1) ids: far fewer than its 64
    # lookups), padded at most to the largest step seen.
    assert replicated_figures["hybrid_table"] == {"table/embeddings": "dense"}
    hybrid = replicated_figures["hybrid"]["bytes_per_step"]
    stock = replicated_figures["stock"]["bytes_per_step"]
    assert hybrid["sparse_pull"] == 0
    assert 0 < hybrid["sparse_push"] < 0.75 * stock["sparse_push"]
    assert 0 < hybrid["ids"] < 0.75 * stock["ids"]
    assert hybrid["padding"] >= 0
    assert hybrid["sparse_push"] + hybrid["padding"] < stock["sparse_push"]
    assert replicated_figures["max_weight_change"] > 1e-3, "no training"
    assert replicated_figures["max_weight_difference"] < 1e-5

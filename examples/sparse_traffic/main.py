"""Traffic of the sparse path on an LM-shaped workload, against its bound.

    python -m keras_hybrid.run -np 4 --threads 1 \\
        python examples/sparse_traffic/main.py

Every worker looks up `--seqs_per_worker` x `--seq_len` Zipf-distributed
token ids per step in a partitioned `Embedding` table. After
`--warmup_steps`, each worker counts, step by step, the bytes it sends on
the sparse paths of `CommStats` (`sparse_pull`, `sparse_push`, `ids`,
`padding`) and rank 0 prints them next to two lower bounds for the
worker's u unique ids (r bytes per row, 8 per int64 id):

- all unique ids: `2 u r + 8 u`;
- remote ids only (`u_remote`, the unique ids other workers own; rows a
  worker owns itself never cross the network): `2 u_remote r + 8 u_remote`.

For context it also prints what a replicated table would cost: stock
all-gather of the `IndexedSlices` gradient (n lookups per worker, rows and
int64 ids) and a dense all-reduce of the whole table. The last line is
`SPARSE_TRAFFIC_JSON {...}` with every figure.
"""

import json
import os
import time

import keras
import numpy as np
import tensorflow as tf
from absl import app
from absl import flags
from absl import logging

import keras_hybrid
from keras_hybrid.comm import ladder
from keras_hybrid.comm.comm_stats import PATHS

FLAGS = flags.FLAGS
flags.DEFINE_integer(
    "vocab", 100_000, "Rows of the embedding table.", lower_bound=1
)
flags.DEFINE_integer(
    "dim", 128, "Embedding width (float32 values).", lower_bound=1
)
flags.DEFINE_integer(
    "seqs_per_worker",
    64,
    "Sequences per worker and step; the global batch is this times the "
    "number of workers.",
    lower_bound=1,
)
flags.DEFINE_integer("seq_len", 32, "Tokens per sequence.", lower_bound=1)
flags.DEFINE_float(
    "zipf", 1.1, "Exponent s of p(k) ~ 1 / (k + 1)**s over ids [0, vocab)."
)
flags.DEFINE_integer(
    "warmup_steps", 3, "Steps run before measuring.", lower_bound=1
)
flags.DEFINE_integer("steps", 10, "Measured steps.", lower_bound=1)
flags.DEFINE_integer("seed", 0, "Seed of the data and the model.")
flags.DEFINE_string(
    "out_dir", "", "If set, rank 0 also writes sparse_traffic.json here."
)

SPARSE_PATHS = ("sparse_pull", "sparse_push", "ids", "padding")
ID_BYTES = 8  # `lookup.pull` sends ids as int64 local row indices.
HIDDEN, CLASSES = 64, 8


def make_data(num_seqs: int, seq_len: int, vocab: int, s: float, seed: int):
    """Token ids from a Zipf law truncated to [0, vocab), and labels.

    Every worker draws the same arrays, so each can recompute any worker's
    slice of any global batch.
    """
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, vocab + 1, dtype=np.float64) ** s
    ids = rng.choice(vocab, size=(num_seqs, seq_len), p=p / p.sum())
    labels = rng.integers(0, CLASSES, size=num_seqs)
    return ids.astype(np.int64), labels.astype(np.int32)


def build_model(vocab: int, dim: int, seq_len: int) -> keras.Model:
    model = keras.Sequential(
        [
            keras.Input((seq_len,), dtype="int64"),
            keras.layers.Embedding(vocab, dim),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(HIDDEN, activation="relu"),
            keras.layers.Dense(CLASSES),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.SGD(0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


class StepTraffic(keras.callbacks.Callback):
    """Records, per train step, the bytes sent on each path and the time."""

    def __init__(self, stats) -> None:
        super().__init__()
        self._stats = stats
        self.rows: list[list[int]] = []

    def _now(self):
        snap = self._stats.snapshot()
        return [snap[p]["bytes"] for p in PATHS], time.perf_counter()

    def on_train_begin(self, logs=None):
        self._last = self._now()

    def on_train_batch_end(self, batch, logs=None):
        now = self._now()
        sent = [a - b for a, b in zip(now[0], self._last[0], strict=True)]
        micros = int(1e6 * (now[1] - self._last[1]))
        self.rows.append(sent + [micros])
        self._last = now


def measure(strategy, ids, labels, global_batch: int, warmup: int):
    """Trains `warmup` steps, then one step per remaining global batch.

    Returns:
        Int64 array `[size, steps, len(PATHS) + 1]` on every worker: the
        bytes each worker sent per path and step, then its microseconds.
    """
    with strategy.scope():
        model = build_model(FLAGS.vocab, FLAGS.dim, FLAGS.seq_len)
    split = warmup * global_batch
    fit = dict(batch_size=global_batch, shuffle=False, verbose=0)
    model.fit(ids[:split], labels[:split], **fit)
    recorder = StepTraffic(strategy.communicator.stats)
    model.fit(ids[split:], labels[split:], callbacks=[recorder], **fit)
    mine = tf.constant(recorder.rows, tf.int64)
    gathered, _ = strategy.communicator.all_gather(mine)
    return gathered.numpy().reshape(strategy.size, len(recorder.rows), -1)


def count_matrices(ids, partition, size: int, global_batch: int):
    """`C[s, i, j]`: unique ids of worker i's slice of global batch s that
    worker j owns (worker i gets rows `[i b // N, (i + 1) b // N)`)."""
    steps = ids.shape[0] // global_batch
    counts = np.zeros((steps, size, size), np.int64)
    for s in range(steps):
        batch = ids[s * global_batch : (s + 1) * global_batch]
        for i in range(size):
            rows = batch[
                i * global_batch // size : (i + 1) * global_batch // size
            ]
            owner = partition.shard_of(np.unique(rows))
            counts[s, i] = np.bincount(owner, minlength=size)
    return counts


def pair_capacities(counts) -> np.ndarray:
    """Rows of each pair's all-to-all block: the capacity ladder's step at
    or above that pair's own count, at least one (`C[s, i, j]`,
    self-owned included, though those are never sent)."""
    return ladder.capacities_of(counts, pairwise=True)


def expected_bytes(counts, row_bytes: int) -> dict:
    """What `lookup.pull` and its gradient make each worker send.

    A worker sends the ids it needs from others (`ids`), serves the rows
    others ask it for (`sparse_pull`) and pushes the gradient rows of its
    remote ids (`sparse_push`). Each of these three all-to-alls pads each
    pair's block to the ladder step of that pair's own count.

    Returns:
        Dict of `[steps, size]` arrays of bytes.
    """
    own = np.diagonal(counts, axis1=1, axis2=2)
    out = counts.sum(axis=2) - own
    served = counts.sum(axis=1) - own
    caps = pair_capacities(counts)
    own_caps = np.diagonal(caps, axis1=1, axis2=2)
    out_slots = caps.sum(axis=2) - own_caps
    served_slots = caps.sum(axis=1) - own_caps
    return {
        "sparse_pull": served * row_bytes,
        "sparse_push": out * row_bytes,
        "ids": out * ID_BYTES,
        "padding_ids": (out_slots - out) * ID_BYTES,
        "padding_pull": (served_slots - served) * row_bytes,
        "padding_push": (out_slots - out) * row_bytes,
    }


def worker_figures(sent, counts, rank: int, lookups: list) -> dict:
    """Means per step of what `rank` sent, its bounds and baselines."""
    size = counts.shape[1]
    row_bytes = 4 * FLAGS.dim
    per_id = 2 * row_bytes + ID_BYTES
    unique = counts[:, rank].sum(axis=1)
    remote = unique - counts[:, rank, rank]
    sparse = sent[rank][:, [PATHS.index(p) for p in SPARSE_PATHS]].sum(1)
    figures = {p: float(sent[rank, :, i].mean()) for i, p in enumerate(PATHS)}
    figures.update(
        rank=rank,
        lookups=lookups[rank],
        unique=float(unique.mean()),
        remote=float(remote.mean()),
        sparse=float(sparse.mean()),
        bound_all=float(unique.mean() * per_id),
        bound_remote=float(remote.mean() * per_id),
        ratio_all_max_step=float(np.max(sparse / (unique * per_id))),
        ms_per_step=float(np.median(sent[rank, :, -1]) / 1e3),
        stock_all_gather=float(
            (sum(lookups) - lookups[rank]) * (row_bytes + ID_BYTES)
        ),
        dense_all_reduce=2 * (size - 1) / size * FLAGS.vocab * row_bytes,
    )
    expected = expected_bytes(counts, row_bytes)
    figures["expected"] = {
        k: float(v[:, rank].mean()) for k, v in expected.items()
    }
    return figures


_SUMMED = (
    "lookups",
    "unique",
    "remote",
    *PATHS,
    "sparse",
    "bound_all",
    "bound_remote",
)


def _ratio(num, den):
    return float(num / den) if den else None


def summarize(sent, counts, global_batch: int) -> dict:
    """Figures per worker (means per step) and for the whole job."""
    steps, size, _ = counts.shape
    lookups = [
        FLAGS.seq_len
        * ((r + 1) * global_batch // size - r * global_batch // size)
        for r in range(size)
    ]
    workers = [worker_figures(sent, counts, r, lookups) for r in range(size)]
    job = {key: sum(w[key] for w in workers) for key in _SUMMED}
    for row in (*workers, job):
        row["ratio_all"] = _ratio(row["sparse"], row["bound_all"])
        row["ratio_remote"] = _ratio(row["sparse"], row["bound_remote"])
    remote_counts = counts[:, ~np.eye(size, dtype=bool)]
    job.update(
        capacity=float(pair_capacities(remote_counts).mean())
        if size > 1
        else 0.0,
        largest_count=float(counts.max(axis=(1, 2)).mean()),
        mean_remote_count=float(remote_counts.mean()) if size > 1 else 0.0,
    )
    config = {
        k: FLAGS[k].value
        for k in ("vocab", "dim", "seqs_per_worker", "seq_len", "zipf")
    }
    return {
        "workers": size,
        "steps": steps,
        "global_batch": global_batch,
        **config,
        "per_worker": workers,
        "job": job,
    }


def _kb(key: str):
    return lambda w: f"{w[key] / 1e3:.1f}"


def _fixed(key: str, digits: int):
    return lambda w: "-" if w[key] is None else f"{w[key]:.{digits}f}"


def _expected(keys):
    return lambda w: f"{sum(w['expected'][k] for k in keys) / 1e3:.1f}"


_PADDING = ("padding_ids", "padding_pull", "padding_push")
TRAFFIC = (
    ("rank", lambda w: w["rank"]),
    ("lookups", lambda w: w["lookups"]),
    ("unique", _fixed("unique", 0)),
    ("remote", _fixed("remote", 0)),
    ("pull_kB", _kb("sparse_pull")),
    ("push_kB", _kb("sparse_push")),
    ("ids_kB", _kb("ids")),
    ("pad_kB", _kb("padding")),
    ("sparse_kB", _kb("sparse")),
    ("control_kB", _kb("control")),
    ("dense_kB", _kb("dense")),
)
BOUNDS = (
    ("rank", lambda w: w["rank"]),
    ("sparse_kB", _kb("sparse")),
    ("bound_all_kB", _kb("bound_all")),
    ("ratio_all", _fixed("ratio_all", 3)),
    ("worst_step", _fixed("ratio_all_max_step", 3)),
    ("bound_remote_kB", _kb("bound_remote")),
    ("ratio_remote", _fixed("ratio_remote", 3)),
    ("stock_gather_kB", _kb("stock_all_gather")),
    ("dense_allreduce_kB", _kb("dense_all_reduce")),
    ("ms/step", _fixed("ms_per_step", 0)),
)
PADDING = (
    ("rank", lambda w: w["rank"]),
    *((f"{k}_kB", _expected([k])) for k in _PADDING),
    ("expected_pad_kB", _expected(_PADDING)),
    ("measured_pad_kB", _kb("padding")),
    (
        "expected_sparse_kB",
        _expected(("sparse_pull", "sparse_push", "ids", *_PADDING)),
    ),
)


def _table(columns, rows) -> str:
    cells = [[h for h, _ in columns]]
    cells += [[str(f(row)) for _, f in columns] for row in rows]
    widths = [max(len(c) for c in col) for col in zip(*cells, strict=True)]
    lines = [
        " ".join(c.rjust(w) for c, w in zip(line, widths, strict=True))
        for line in cells
    ]
    return "\n".join([lines[0], "-" * len(lines[0]), *lines[1:]])


def report(fig: dict) -> str:
    """Traffic, bounds and baselines, and padding: three tables."""
    workers = fig["per_worker"]
    job = fig["job"]
    blocks = [
        _table(TRAFFIC, [*workers, {**job, "rank": "all"}]),
        _table(BOUNDS, workers)
        + f"\njob: ratio_all {_fixed('ratio_all', 3)(job)}, "
        f"ratio_remote {_fixed('ratio_remote', 3)(job)}",
    ]
    if fig["workers"] > 1:
        blocks.append(
            _table(PADDING, workers)
            + f"\nall-to-all blocks: {job['capacity']:.1f} rows per pair "
            f"(ladder of each pair's count) for a mean remote count of "
            f"{job['mean_remote_count']:.1f} (largest count "
            f"{job['largest_count']:.1f})"
        )
    return "\n\n".join(blocks)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    keras.backend.clear_session()
    keras.utils.set_random_seed(FLAGS.seed)
    # This example measures the partitioned path itself, so the table is
    # partitioned whatever the cost rule would choose for these sizes.
    strategy = keras_hybrid.HybridStrategy(
        variable_kinds={".*embeddings": "sparse"}
    )
    if FLAGS.vocab < strategy.size:
        # With fewer rows than workers the plan keeps the table dense.
        raise app.UsageError(
            "`--vocab` must be >= the number of workers. Received: "
            f"--vocab={FLAGS.vocab} with {strategy.size} workers."
        )
    global_batch = FLAGS.seqs_per_worker * strategy.size
    num_seqs = (FLAGS.warmup_steps + FLAGS.steps) * global_batch
    ids, labels = make_data(
        num_seqs, FLAGS.seq_len, FLAGS.vocab, FLAGS.zipf, FLAGS.seed
    )
    sent = measure(strategy, ids, labels, global_batch, FLAGS.warmup_steps)
    if not strategy.is_chief:
        return
    (table,) = strategy.plan.of_kind("sparse")
    measured = ids[FLAGS.warmup_steps * global_batch :]
    counts = count_matrices(
        measured, table.partition, strategy.size, global_batch
    )
    fig = summarize(sent, counts, global_batch)
    logging.info("Plan:\n%s", strategy.plan)
    print(
        f"Sparse traffic per worker and step, {strategy.size} worker(s), "
        f"{fig['steps']} steps: vocab {FLAGS.vocab}, dim {FLAGS.dim}, "
        f"{FLAGS.seqs_per_worker}x{FLAGS.seq_len} ids/worker, "
        f"Zipf({FLAGS.zipf}). kB = 1000 bytes sent.\n"
    )
    print(report(fig))
    print("SPARSE_TRAFFIC_JSON " + json.dumps(fig))
    if FLAGS.out_dir:
        with open(os.path.join(FLAGS.out_dir, "sparse_traffic.json"), "w") as f:
            json.dump(fig, f, indent=1)


if __name__ == "__main__":
    app.run(main)

"""Stock Horovod vs HybridStrategy on Horovod, side by side in one run.

    horovodrun -np 2 --gloo python examples/horovod_comparison/main.py

The same embedding model (a `--vocab` x `--dim` table, mean-pooled, two
Dense layers) is trained on the same Zipf-distributed ids twice in one job:

- `stock`: the plain Horovod recipe for Keras 3: every worker holds the
  whole table, `train_step` sums gradients with `hvd.allreduce(grad,
  op=hvd.Average)`. For the table's `tf.IndexedSlices` gradient Horovod
  all-gathers the rows and ids of every lookup (no dedupe, no local sum).
- `hybrid`: `keras_hybrid.HybridStrategy(engine="horovod")`. With
  `--placement=auto` (the default, what a user gets) the cost rule decides
  the table: on 2 workers it keeps it replicated and each worker sums its
  gradient rows per id before they are all-gathered (one row per distinct
  id, one round); from 3 workers on it partitions it. With
  `--placement=partitioned` the table is partitioned whatever the cost
  rule says: each worker pulls and pushes only the rows of its unique ids
  (`hvd.alltoall`, three dependent rounds); with `--placement=replicated`
  it is replicated whatever the rule says. Dense gradients are fused
  `hvd.allreduce`s.

Both start from the same weights, see the same samples in each step and
use SGD, so they compute the same training (the final weights are
compared). Timing alternates: `--rounds` rounds of `--steps` timed steps,
stock first in even rounds and hybrid first in odd ones, so that load from
other processes on the machine falls on both; samples/s is the median over
rounds, and each round's ratio is reported too. Bytes are what this
worker sends, by the same model for both
(`CommStats`; an all-reduce of D bytes costs 2 (N - 1) / N D, an all-gather
of D local bytes (N - 1) D). Rank 0 prints samples/s and bytes per step of
each and their ratios; the last line is `HOROVOD_COMPARISON_JSON {...}`.
"""

import json
import os
import time

import keras
import numpy as np
import tensorflow as tf
from absl import app
from absl import flags

import keras_hybrid
from keras_hybrid.comm.comm_stats import CommStats

FLAGS = flags.FLAGS
flags.DEFINE_integer("vocab", 100_000, "Rows of the table.", lower_bound=1)
flags.DEFINE_integer("dim", 64, "Width of the table.", lower_bound=1)
flags.DEFINE_integer(
    "seqs_per_worker", 64, "Sequences per worker and step.", lower_bound=1
)
flags.DEFINE_integer("seq_len", 32, "Ids per sequence.", lower_bound=1)
flags.DEFINE_float("zipf", 1.1, "Exponent s of p(k) ~ 1 / (k + 1)**s.")
flags.DEFINE_integer("warmup_steps", 3, "Untimed steps.", lower_bound=1)
flags.DEFINE_integer("steps", 20, "Timed steps per round.", lower_bound=1)
flags.DEFINE_integer(
    "rounds", 3, "Timed rounds per mode, alternating.", lower_bound=1
)
flags.DEFINE_float("learning_rate", 0.5, "SGD learning rate.")
flags.DEFINE_enum(
    "placement",
    "auto",
    ["auto", "partitioned", "replicated"],
    "The hybrid table: as the cost rule decides, partitioned or replicated.",
)
flags.DEFINE_enum(
    "indexed_slices",
    None,
    ["allgather", "allgather_unique", "densify"],
    "HybridStrategy's `indexed_slices` (a replicated table's gradient); "
    "unset: the cost rule's choice.",
)
flags.DEFINE_string(
    "out_dir", "", "If set, rank 0 also writes horovod_comparison.json here."
)

HIDDEN, CLASSES = 64, 8
SHOWN_PATHS = (
    "dense",
    "sparse_pull",
    "sparse_push",
    "ids",
    "padding",
    "control",
)


def make_data(num_seqs: int):
    """Zipf ids over [0, vocab) and labels; the same on every worker."""
    rng = np.random.default_rng(0)
    p = 1.0 / np.arange(1, FLAGS.vocab + 1, dtype=np.float64) ** FLAGS.zipf
    ids = rng.choice(FLAGS.vocab, size=(num_seqs, FLAGS.seq_len), p=p / p.sum())
    labels = rng.integers(0, CLASSES, size=num_seqs)
    return ids.astype(np.int32), labels.astype(np.int32)


def build_model(cls=keras.Model) -> keras.Model:
    keras.utils.set_random_seed(1)
    ids = keras.Input((FLAGS.seq_len,), dtype="int32")
    x = keras.layers.Embedding(FLAGS.vocab, FLAGS.dim, name="table")(ids)
    x = keras.layers.GlobalAveragePooling1D()(x)
    x = keras.layers.Dense(HIDDEN, activation="relu")(x)
    return cls(ids, keras.layers.Dense(CLASSES)(x))


class StockHorovodModel(keras.Model):
    """Keras 3 with the plain Horovod recipe: `hvd.allreduce` per gradient.

    (`horovod.tensorflow.keras.DistributedOptimizer` targets Keras 2.) The
    bytes each all-reduce sends are charged to `self.stats` by the model
    `CommStats` uses; `tf.IndexedSlices` are all-gathered by Horovod.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        import horovod.tensorflow as hvd

        self.hvd = hvd
        self.stats = CommStats()

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = self.compute_loss(x=x, y=y, y_pred=self(x, training=True))
        variables = self.trainable_variables
        grads = tape.gradient(loss, [v.value for v in variables])
        grads = [self._all_reduce(g) for g in grads]
        self.optimizer.apply(grads, variables)
        return {"loss": loss}

    def _all_reduce(self, grad):
        n = self.hvd.size()
        if isinstance(grad, tf.IndexedSlices):
            for part, path in (
                (grad.values, "sparse_push"),
                (grad.indices, "ids"),
            ):
                rows_bytes = tf.size(part, tf.int64) * part.dtype.size
                self.stats.record(path, (n - 1) * rows_bytes)
        else:
            nbytes = grad.shape.num_elements() * grad.dtype.size
            self.stats.record("dense", 2 * (n - 1) * nbytes // n)
        return self.hvd.allreduce(grad, op=self.hvd.Average)


def local_rows(num_rows: int, batch: int, rank: int, size: int) -> np.ndarray:
    """Rows of every global batch that worker `rank` computes on, in order
    (the slices `HybridStrategy` gives it)."""
    rows = []
    for start in range(0, num_rows, batch):
        lo, hi = (
            start + rank * batch // size,
            start + (rank + 1) * batch // size,
        )
        rows.extend(range(lo, hi))
    return np.asarray(rows)


def timed_fit(model, x, y, batch: int, stats) -> dict:
    """One timed round: `--steps` steps of `fit`; per-step bytes."""
    fit = dict(batch_size=batch, shuffle=False, verbose=0)
    before = stats.snapshot()
    start, cpu = time.perf_counter(), time.process_time()
    model.fit(x, y, **fit)
    seconds = time.perf_counter() - start
    # CPU time of this process (all its threads): on a machine shared
    # with other jobs, less swayed by their load than wall time.
    cpu_ms = 1e3 * (time.process_time() - cpu) / FLAGS.steps
    sent = stats.delta(before)
    per_step = {p: sent[p]["bytes"] / FLAGS.steps for p in SHOWN_PATHS}
    per_step["total"] = sum(per_step.values())
    calls = {p: sent[p]["calls"] / FLAGS.steps for p in SHOWN_PATHS}
    calls["total"] = sum(calls.values())
    return {
        "seconds": seconds,
        "cpu_ms_per_step": cpu_ms,
        "bytes_per_step": per_step,
        "collectives_per_step": calls,
    }


def build_stock(ids, labels, size: int, rank: int, global_batch: int):
    """The stock model, warmed up; returns (run_round, initial weights,
    final-weights getter)."""
    import horovod.tensorflow as hvd

    model = build_model(StockHorovodModel)
    initial = model.get_weights()
    # The recipe: every worker starts from rank 0's weights.
    hvd.broadcast_variables([v.value for v in model.variables], root_rank=0)
    model.compile(
        optimizer=keras.optimizers.SGD(FLAGS.learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    rows = local_rows(len(ids), global_batch, rank, size)
    x, y, batch = ids[rows], labels[rows], global_batch // size
    warm = FLAGS.warmup_steps * batch
    model.fit(x[:warm], y[:warm], batch_size=batch, shuffle=False, verbose=0)
    rounds = iter(_round_slices(warm, batch))

    def run_round():
        part = next(rounds)
        return timed_fit(model, x[part], y[part], batch, model.stats)

    return run_round, initial, model.get_weights


def build_hybrid(strategy, ids, labels, global_batch: int, initial):
    """The hybrid model from `initial`, warmed up; returns (run_round,
    final-weights getter)."""
    with strategy.scope():
        model = build_model()
        model.compile(
            optimizer=keras.optimizers.SGD(FLAGS.learning_rate),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
    model.set_weights(initial)
    warm = FLAGS.warmup_steps * global_batch
    fit = dict(batch_size=global_batch, shuffle=False, verbose=0)
    model.fit(ids[:warm], labels[:warm], **fit)
    stats = strategy.communicator.stats
    rounds = iter(_round_slices(warm, global_batch))

    def run_round():
        part = next(rounds)
        return timed_fit(model, ids[part], labels[part], global_batch, stats)

    return run_round, model.get_weights


def _round_slices(warm: int, batch: int) -> list[slice]:
    """Each round trains on its own `--steps` batches after the warm-up,
    so the rounds together are one run over distinct data."""
    rows = FLAGS.steps * batch
    return [
        slice(warm + r * rows, warm + (r + 1) * rows)
        for r in range(FLAGS.rounds)
    ]


def alternate(run_stock, run_hybrid) -> tuple[list, list]:
    """`--rounds` timed rounds of each, in ABBA order."""
    stock, hybrid = [], []
    for r in range(FLAGS.rounds):
        if r % 2 == 0:
            stock.append(run_stock())
            hybrid.append(run_hybrid())
        else:
            hybrid.append(run_hybrid())
            stock.append(run_stock())
    return stock, hybrid


def summarize(stock, hybrid, size, global_batch, weights) -> dict:
    """Per-mode figures (median samples/s over rounds, bytes per step of
    the last round), ratios, and how far the weights moved and differ."""
    initial, stock_weights, hybrid_weights = weights
    samples = global_batch * FLAGS.steps
    out = {"workers": size, "global_batch": global_batch}
    for name, rounds in (("stock", stock), ("hybrid", hybrid)):
        speeds = [samples / r["seconds"] for r in rounds]
        out[name] = {
            "samples_per_s": float(np.median(speeds)),
            "samples_per_s_per_round": speeds,
            "cpu_ms_per_step": float(
                np.median([r["cpu_ms_per_step"] for r in rounds])
            ),
            "bytes_per_step": rounds[-1]["bytes_per_step"],
            "collectives_per_step": rounds[-1]["collectives_per_step"],
        }
    per_round = [
        h / s
        for h, s in zip(
            out["hybrid"]["samples_per_s_per_round"],
            out["stock"]["samples_per_s_per_round"],
            strict=True,
        )
    ]
    out["hybrid_over_stock"] = {
        "bytes_per_step": hybrid[-1]["bytes_per_step"]["total"]
        / stock[-1]["bytes_per_step"]["total"],
        "samples_per_s": out["hybrid"]["samples_per_s"]
        / out["stock"]["samples_per_s"],
        "samples_per_s_per_round": per_round,
        # Each round's pair ran back to back: their ratio is less swayed
        # by load that comes and goes than the ratio of the medians.
        "median_round_ratio": float(np.median(per_round)),
    }
    out["max_weight_difference"] = _max_diff(stock_weights, hybrid_weights)
    out["max_weight_change"] = _max_diff(stock_weights, initial)
    return out


def _max_diff(a, b) -> float:
    return max(float(np.abs(x - y).max()) for x, y in zip(a, b, strict=True))


def report(fig: dict) -> str:
    head = f"{'mode':<8}{'samples/s':>11}" + "".join(
        f"{p:>13}" for p in (*SHOWN_PATHS, "total")
    )
    lines = [
        f"{fig['workers']} worker(s), global batch {fig['global_batch']}; "
        f"hybrid's table: {fig['hybrid_table']}; "
        "kB sent per step by this worker:",
        head,
    ]
    for name in ("stock", "hybrid"):
        r = fig[name]
        kb = r["bytes_per_step"]
        lines.append(
            f"{name:<8}{r['samples_per_s']:>11.1f}"
            + "".join(f"{kb[p] / 1e3:>13.1f}" for p in (*SHOWN_PATHS, "total"))
        )
    lines.append(
        "collectives per step (all-reduce, all-gather or all-to-all "
        "calls), median CPU ms per step of this process: "
        + ", ".join(
            f"{name} {fig[name]['collectives_per_step']['total']:g}, "
            f"{fig[name]['cpu_ms_per_step']:.1f} ms"
            for name in ("stock", "hybrid")
        )
    )
    ratio = fig["hybrid_over_stock"]
    per_round = ", ".join(f"{r:.2f}" for r in ratio["samples_per_s_per_round"])
    lines.append(
        f"hybrid/stock: bytes per step {ratio['bytes_per_step']:.3f}, "
        f"median samples/s {ratio['samples_per_s']:.2f}, median of the "
        f"rounds' ratios {ratio['median_round_ratio']:.2f} (rounds: "
        f"{per_round}); weights moved up to "
        f"{fig['max_weight_change']:.2e} and differ by at most "
        f"{fig['max_weight_difference']:.2e}"
    )
    return "\n".join(lines)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    # Initializes Horovod (with the strategy's stall timeout) for both.
    kinds = None
    if FLAGS.placement == "partitioned":
        kinds = {".*embeddings": "sparse"}
    elif FLAGS.placement == "replicated":
        kinds = {".*embeddings": "dense"}
    strategy = keras_hybrid.HybridStrategy(
        engine="horovod",
        variable_kinds=kinds,
        indexed_slices=FLAGS.indexed_slices,
    )
    size, rank = strategy.size, strategy.rank
    global_batch = FLAGS.seqs_per_worker * size
    steps = FLAGS.warmup_steps + FLAGS.rounds * FLAGS.steps
    ids, labels = make_data(global_batch * steps)
    run_stock, initial, stock_weights = build_stock(
        ids, labels, size, rank, global_batch
    )
    run_hybrid, hybrid_weights = build_hybrid(
        strategy, ids, labels, global_batch, initial
    )
    stock, hybrid = alternate(run_stock, run_hybrid)
    fig = summarize(
        stock,
        hybrid,
        size,
        global_batch,
        (initial, stock_weights(), hybrid_weights()),
    )
    fig["hybrid_table"] = {
        v.path: v.kind
        for v in strategy.plan.variables
        if v.path.endswith("embeddings")
    }
    if rank != 0:
        return
    print(report(fig))
    print("HOROVOD_COMPARISON_JSON " + json.dumps(fig))
    if FLAGS.out_dir:
        path = os.path.join(FLAGS.out_dir, "horovod_comparison.json")
        with open(path, "w") as f:
            json.dump(fig, f, indent=1)


if __name__ == "__main__":
    app.run(main)

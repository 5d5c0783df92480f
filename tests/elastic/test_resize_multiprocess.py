"""Elastic training: a plain `fit` grows 2 -> 4 and shrinks 4 -> 3.

`keras-hybrid-run --min-np 2 --max-np 4 --host-discovery-script` runs
`workers/elastic_fit_worker.py` while the test rewrites the discovery
output as the chief's progress file shows each step: 2 slots, then 4 once
training runs (the chief holds at step 10 until the launcher planned the
grow), then 3 once 4 workers trained a few steps. The final
weights must equal one process trained on the same global batches (1e-5),
every size must have been seen by the script's own callback, and both
resizes must be recorded with their bytes and stall.

`ElasticTableFitTest` runs the same with `--model=table`: a partitioned
`Embedding` (Adam, so its slots move too) beside a dense part. Its rows
move by virtual shard at each resize (joiners receive theirs in the
exchange, the leaver hands its rows over), and the reference densifies
the table's gradient (the strategy's semantics for Adam).
"""

import json
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import pytest

from keras_hybrid.testing import TestCase
from keras_hybrid.testing import models
from keras_hybrid.testing import plan_text

HERE = os.path.dirname(__file__)
WORKER = os.path.join(HERE, "workers", "elastic_fit_worker.py")
sys.path.insert(0, os.path.join(HERE, "workers"))
import elastic_cases as cases  # noqa: E402

pytestmark = pytest.mark.multiprocess

TIMEOUT = 400
ARGS = ("--epochs=2", "--batch_size=12", "--num_samples=480")


def _sizes(out_dir: str) -> list:
    path = os.path.join(out_dir, "progress.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.endswith("\n")]


class ElasticFitTest(TestCase):
    MODEL = "mlp"

    def test_grow_then_shrink_equals_one_process(self):
        output, result, sizes = _run_job([f"--model={self.MODEL}"])
        # Each step the script's own callback saw the current size.
        changes = [
            s for i, s in enumerate(sizes) if i == 0 or sizes[i - 1] != s
        ]
        self.assertEqual(changes, [2, 4, 3], output[-4000:])
        self.assertEqual(len(sizes), 80)  # 2 epochs of 40 global batches
        reference = self._reference(result)
        for got, want in zip(result["weights"], reference, strict=True):
            np.testing.assert_allclose(got, want, atol=1e-5)
        resizes = result["resizes"]
        self.assertEqual(
            [(r["old_size"], r["new_size"]) for r in resizes], [(2, 4), (4, 3)]
        )
        self._check_bytes(*resizes)
        for r in resizes:
            self.assertEqual(r["reason"], "discovery")
            self.assertGreaterEqual(r["stall_seconds"], 0.0)
        self.assertIn("retires at global step", output)
        # One train step, traced once, ran through both resizes: group,
        # rank, loss scale and (with a table) its partition are variables.
        self.assertEqual(result["traces"], [1])
        self.assertNotIn("retrace_seconds", resizes[0])
        # CommunicationStats (every 5 steps, a collective) reports them too.
        self.assertEqual(len(result["stats_resizes"]), 2)
        self.assertIn("Elastic resizes:", output)
        self.assertIn("table_wire", output)

    def _reference(self, result, **optimizer) -> list:
        """Plain Keras in this process on the same global batches."""
        del result
        x, y = models.make_data(480)
        model = models.build_model("sequential", seed=100)
        models.compile_model(model, "adam", **optimizer)
        model.fit(x, y, batch_size=12, epochs=2, shuffle=False, verbose=0)
        return model.get_weights()

    def _check_bytes(self, grow, shrink) -> None:
        self.assertGreater(grow["bytes_moved"], 0)
        self.assertEqual(shrink["bytes_moved"], 0)
        self.assertEqual(grow["table_bytes"] + shrink["table_bytes"], 0)


class ElasticAccumulationTest(TestCase):
    def test_members_change_between_accumulation_cycles(self):
        # Each member's accumulators hold its own part of the gradients
        # until the cycle's 3rd step sums them: a joiner that copied rank
        # 0's counted that part twice. Resizes wait for the cycle's end,
        # and a joiner skips 2 batches per call of the train function.
        output, result, sizes = _run_job(
            [
                "--model=mlp",
                "--accumulation=3",
                "--steps_per_execution=2",
            ]
        )
        changes = [
            s for i, s in enumerate(sizes) if i == 0 or sizes[i - 1] != s
        ]
        self.assertEqual(changes, [2, 4, 3], output[-4000:])
        self.assertEqual(len(sizes), 40)  # 80 global batches, 2 per call
        resizes = result["resizes"]
        self.assertEqual(
            [(r["old_size"], r["new_size"]) for r in resizes], [(2, 4), (4, 3)]
        )
        for r in resizes:  # global steps count calls of 2 batches
            self.assertEqual(r["global_step"] * 2 % 3, 0, r)
        reference = ElasticFitTest._reference(
            self, result, gradient_accumulation_steps=3
        )
        for got, want in zip(result["weights"], reference, strict=True):
            np.testing.assert_allclose(got, want, atol=1e-5)


def _run_job(
    worker_args: list, shrink: bool = True, flags: tuple = ()
) -> tuple:
    """Runs the worker elastically under `_drive` (with the launcher's
    extra `flags`); returns the launcher's output, the chief's result and
    the sizes its callback recorded."""
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = os.path.join(tmp, "elastic")
        os.makedirs(out_dir)
        slots = os.path.join(tmp, "slots")
        script = os.path.join(tmp, "hosts.sh")
        with open(script, "w") as f:
            f.write(f"#!/bin/sh\ncat {slots}\n")
        os.chmod(script, 0o755)
        _write(slots, "localhost:2\n")
        _write(os.path.join(out_dir, "pace"), "")
        _write(os.path.join(out_dir, "hold"), "")
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "keras_hybrid.run"),
                *("--min-np", "2", "--max-np", "4", "--threads", "1"),
                *("--host-discovery-script", script),
                *("--discovery-interval", "0.2"),
                *flags,
                *(sys.executable, WORKER, f"--out_dir={out_dir}"),
                *ARGS,
                "--step_sleep=0.1",
                "--hold_at_step=10",
                f"--slots_file={slots}",
                "--timeout_seconds=60",
                *worker_args,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        )
        lines = []
        reader = threading.Thread(
            target=lambda: lines.extend(iter(proc.stdout.readline, "")),
            daemon=True,
        )
        reader.start()
        try:
            _drive(proc, out_dir, slots, lines, shrink)
            proc.wait(timeout=TIMEOUT)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            reader.join(timeout=10)
        output = "".join(lines)
        if proc.returncode != 0:
            raise AssertionError(
                f"exit code {proc.returncode}\n{output[-6000:]}"
            )
        with open(os.path.join(out_dir, "rank0.pkl"), "rb") as f:
            result = pickle.load(f)
        sizes = [row["size"] for row in _sizes(out_dir)]
    return output, result, sizes


def _drive(proc, out_dir: str, slots: str, lines: list, shrink: bool) -> None:
    """Rewrites the discovery output as training goes: 4 slots once
    the job trains, 3 once 4 workers trained 3 steps (if `shrink`), then
    lets the chief run at full speed."""
    deadline = time.monotonic() + TIMEOUT
    stage = 0
    while time.monotonic() < deadline and proc.poll() is None:
        sizes = [row["size"] for row in _sizes(out_dir)]
        if stage == 0 and sizes:
            _write(slots, "localhost:4\n")
            stage = 1
        elif stage == 1 and any("generation 1 planned" in x for x in lines):
            os.remove(os.path.join(out_dir, "hold"))
            stage = 2 if shrink else 3
        elif stage == 2 and sizes.count(4) >= 3:
            _write(slots, "localhost:3\n")
            stage = 3
        elif stage == 3 and sizes.count(3) >= 3:
            os.remove(os.path.join(out_dir, "pace"))
            return
        time.sleep(0.1)


def _write(path: str, text: str) -> None:
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


class ElasticTableFitTest(ElasticFitTest):
    MODEL = "table"
    # A row of the table and of Adam's m and v: 3 x 8 float32.
    ROW_BYTES = 3 * 8 * 4

    def _reference(self, result) -> list:
        """A plain Keras loop on the same global batches, from the job's
        initial weights, with the table's gradient made dense (summed per
        id, as the strategy applies it for Adam)."""
        self.assertTrue(
            plan_text.partitioned(result["plan"], "table/embeddings"),
            result["plan"],
        )
        return cases.table_reference(result["initial"])

    def _check_bytes(self, grow, shrink) -> None:
        # 2 -> 4: each old member hands 125 of its 250 one-row virtual
        # shards to a joiner (the least a balance can move); 4 -> 3: the
        # leaver's 125 rows. Slots move with their rows.
        self.assertEqual(grow["table_bytes"], 250 * self.ROW_BYTES)
        self.assertEqual(shrink["table_bytes"], 125 * self.ROW_BYTES)
        # On the wire only the pairs that move rows talk, each block at its
        # own ladder step (`comm.pair_moves`). Counted in rows of 8 float32
        # (table, m and v rows together): the grow's four pairs carry 189,
        # 186, 186 and 189 rows, 192 each on the wire; the leaver sends 126,
        # 126 and 123 rows as 128, 128 and 124.
        self.assertEqual(grow["table_wire_bytes"], 4 * 192 * 8 * 4)
        self.assertEqual(shrink["table_wire_bytes"], (128 + 128 + 124) * 8 * 4)
        for event in (grow, shrink):
            self.assertLessEqual(
                event["table_wire_bytes"], 1.1 * event["table_bytes"]
            )
        # Rank 0 sends the joiners the replicated state only: less than
        # one copy of the table's weights each.
        self.assertLess(grow["state_bytes"], 2 * cases.VOCAB * 8 * 4)
        self.assertEqual(shrink["bytes_moved"], shrink["table_bytes"])


class ElasticAcceptanceTest(TestCase):
    """Elastic training's acceptance scenario in one job: a plain `fit` on a
    subclassed model whose tables live in a custom layer (the placement
    zoo's `TokenAndPosition`, Adam) grows 2 -> 4, shrinks 4 -> 3, then
    rank 1 (its rows go to rank 2, a joiner) is SIGKILLed 5 steps after
    the shrink, and the job finishes on 2 workers."""

    MODEL = "custom_table"
    # Partitioned; the 2-row position table stays dense (fewer rows than
    # --max-np), although `.*embeddings` names it too.
    TABLES = ("custom_table/tok_pos/token/embeddings",)
    KILL_RANK = 1  # its rows go to rank 2, a joiner

    def test_grow_shrink_and_lost_worker_equal_one_process(self):
        output, result, sizes = _run_job(
            [
                f"--model={self.MODEL}",
                f"--kill_rank={self.KILL_RANK}",
                *("--kill_size=3", "--kill_after=5"),
            ]
        )
        changes = [
            s for i, s in enumerate(sizes) if i == 0 or sizes[i - 1] != s
        ]
        self.assertEqual(changes, [2, 4, 3, 2], output[-4000:])
        # 80 global batches, plus the ones replayed after the loss.
        self.assertGreater(len(sizes), 80)
        for table in self.TABLES:
            self.assertTrue(
                plan_text.partitioned(result["plan"], table), result["plan"]
            )
        reference = cases.table_reference(result["initial"], name=self.MODEL)
        for got, want in zip(result["weights"], reference, strict=True):
            np.testing.assert_allclose(got, want, atol=1e-5)
        reasons = [
            (r["reason"], r["old_size"], r["new_size"])
            for r in result["resizes"]
        ]
        self.assertEqual(
            reasons,
            [("discovery", 2, 4), ("discovery", 4, 3), ("lost_worker", 3, 2)],
        )
        self.assertEqual(result["resizes"][2]["left"], [self.KILL_RANK])
        self.assertIn(f"lost worker [{self.KILL_RANK}]", output)


class ElasticAcceptanceSharedTableTest(ElasticAcceptanceTest):
    """The same on a functional model that looks one table up twice (the
    two lookups' gradients meet on the owner), losing rank 2, whose rows
    go to rank 0."""

    MODEL = "shared"
    TABLES = ("table/embeddings",)
    KILL_RANK = 2


class ElasticLossNearGrowTest(TestCase):
    """A worker lost within a step of a grow, before the new members'
    first commit: the survivors agree on the commit taken before the
    joiners came, which the joiners lack. They receive its layout from
    rank 0 (`elastic_layout`), the lost member's rows come from its file
    (the directory store), and the tables are re-balanced over the
    survivors, joiners included."""

    def test_rank_1_lost_in_the_first_step_after_a_grow(self):
        output, result, sizes = _run_job(
            [
                "--model=table",
                *("--kill_rank=1", "--kill_size=4", "--kill_after=1"),
                *("--kill_on=begin", "--slots_after=localhost:3"),
            ],
            shrink=False,
        )
        changes = [
            s for i, s in enumerate(sizes) if i == 0 or sizes[i - 1] != s
        ]
        self.assertEqual(changes, [2, 3], output[-4000:])
        self.assertTrue(
            plan_text.partitioned(result["plan"], "table/embeddings"),
            result["plan"],
        )
        reference = cases.table_reference(result["initial"])
        for got, want in zip(result["weights"], reference, strict=True):
            np.testing.assert_allclose(got, want, atol=1e-5)
        self.assertIn("generation 1 planned: 2 -> 4 workers", output)
        # The grow's first step was cut short by the loss: it is recorded
        # without a stall, then the loss.
        grow, lost = result["resizes"]
        self.assertEqual((grow["old_size"], grow["new_size"]), (2, 4))
        self.assertEqual(grow["reason"], "discovery")
        self.assertTrue(grow["cut_short"])
        self.assertIsNone(grow["stall_seconds"])
        self.assertEqual((lost["old_size"], lost["new_size"]), (4, 3))
        self.assertEqual(lost["reason"], "lost_worker")
        self.assertEqual(lost["left"], [1])
        # The commit predates the grow (at global step 10): rank 0 sent
        # the joiners the replicated state, and no table rows.
        self.assertLess(lost["global_step"], 10)
        self.assertGreater(lost["bytes_moved"], lost["table_bytes"])


class ElasticUserScriptTest(TestCase):
    """What a script written for stock Keras does that the tests above do
    not: no `variable_kinds` (the strategy places the tables itself; a
    joiner, one worker until admitted, must decide the kinds the members
    did, `plan.make_plan(workers=)`), `validation_data` (the `evaluate`
    inside a joiner's `fit` is the members' and is not fenced on its own)
    and a grow at the end of an epoch (the joiner is among the members
    that read the epoch's metrics, gather `CommunicationStats` and
    validate right after)."""

    def test_grow_at_an_epoch_end_with_validation_equals_one_process(self):
        output, result, sizes = _run_job(
            [
                "--model=custom_table",
                "--auto_place",
                "--validation=24",
                "--hold_at_step=40",  # the last step of epoch 1
                # The table stays dense: Keras applies its all-gathered
                # `IndexedSlices` to Adam's slots slice by slice, which
                # depends on the worker count (docs/elastic.md, limits).
                "--optimizer=sgd",
            ],
            shrink=False,
        )
        changes = [
            s for i, s in enumerate(sizes) if i == 0 or sizes[i - 1] != s
        ]
        self.assertEqual(changes, [2, 4], output[-4000:])
        self.assertEqual(len(sizes), 80)
        (grow,) = result["resizes"]
        # Left to the strategy, the 384 kB token table cannot pay on up to
        # --max-np 4 workers: every process kept it dense, joiners too.
        token = plan_text.entry(
            result["plan"], "custom_table/tok_pos/token/embeddings"
        )
        self.assertTrue(token.startswith("dense"), token)
        self.assertIn("384.0 kB, partitioning cannot pay on 4 workers", token)
        self.assertEqual(len(result["history"]["val_loss"]), 2)
        reference = cases.table_reference(
            result["initial"], name="custom_table", optimizer="sgd"
        )
        for got, want in zip(result["weights"], reference, strict=True):
            np.testing.assert_allclose(got, want, atol=1e-5)

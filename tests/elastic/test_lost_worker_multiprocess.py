"""Elastic training survives a lost worker (real processes, real SIGKILL).

`keras-hybrid-run --min-np 2 --max-np 3` runs the plain `fit` script
`workers/elastic_loss_worker.py` on three workers; at its step 25, in the
middle of the first epoch between the commits of steps 20 and 30, rank 2
lowers the discovery output to 2 slots and SIGKILLs itself. The two
survivors must go on from the commit of step 20, replay the lost steps on
the same global batches, and end with the weights of plain Keras in one
process (1e-5). Keras shuffles the arrays (`shuffle=True`, the same seed
on every rank and in the reference): the replay draws the same batches.
`ElasticLostWorkerTableTest` does the same with a partitioned `Embedding`
(Adam): the lost worker's rows and slots come back from its commit file,
taken by the next survivor: rank 1's by rank 2 from the shared directory
(the default on one host; its ids come as strings through a
`StringLookup` in a `tf.data` map); rank 2's by rank 0 from the
launcher's folder
(`--commit-store served`, whose workers on the launcher's host write it
directly), in a run where the lost slot then comes back and a joiner is
admitted: 3 -> 2 -> 3. Or from its buddy copy
(`--commit-store buddy`, rank 1 lost).
With `--min-np 2 --max-np 2`, the loss of rank 1 leaves fewer than
`--min-np` workers and discovery never reports a second slot:
the launcher must fail with a clear error within `--elastic-timeout`.
"""

import json
import os
import pickle
import subprocess
import sys
import tempfile
import time

import keras
import numpy as np
import pytest

from keras_hybrid.testing import TestCase
from keras_hybrid.testing import models
from keras_hybrid.testing import plan_text

HERE = os.path.dirname(__file__)
WORKER = os.path.join(HERE, "workers", "elastic_loss_worker.py")
sys.path.insert(0, os.path.join(HERE, "workers"))
import elastic_cases as cases  # noqa: E402

pytestmark = pytest.mark.multiprocess

TIMEOUT = 400


def _run(tmp: str, slots: str, flags: list, worker_flags: list):
    out_dir = os.path.join(tmp, "out")
    os.makedirs(out_dir)
    slots_file = os.path.join(tmp, "slots")
    script = os.path.join(tmp, "hosts.sh")
    with open(script, "w") as f:
        f.write(f"#!/bin/sh\ncat {slots_file}\n")
    os.chmod(script, 0o755)
    with open(slots_file, "w") as f:
        f.write(slots + "\n")
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "keras_hybrid.run", "--threads", "1"),
            *("--host-discovery-script", script),
            *("--discovery-interval", "0.5"),
            *flags,
            *(sys.executable, WORKER, f"--out_dir={out_dir}"),
            f"--slots_file={slots_file}",
            *worker_flags,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    return proc, out_dir, slots_file


def _progress(out_dir: str) -> list:
    with open(os.path.join(out_dir, "progress.jsonl")) as f:
        return [json.loads(line) for line in f if line.endswith("\n")]


class ElasticLostWorkerTest(TestCase):
    def test_survivors_replay_from_the_last_commit(self):
        output, result, rows = self._lose_rank_2_at_step_25()
        # The chief's callback saw 3 workers, then 2; the batches of the
        # first epoch after the commit (20..24) ran again on 2 workers.
        sizes = [r["size"] for r in rows]
        changes = [
            s for i, s in enumerate(sizes) if i == 0 or sizes[i - 1] != s
        ]
        self.assertEqual(changes, [3, 2], output[-4000:])
        first_of_two = sizes.index(2)
        self.assertEqual(rows[first_of_two]["batch"], 20)
        self.assertEqual(rows[first_of_two - 1]["batch"], 24)
        # 2 epochs of 40 global batches, plus the 5 replayed ones.
        self.assertEqual(len(rows), 85)
        for got, want in zip(result["weights"], self._reference(), strict=True):
            np.testing.assert_allclose(got, want, atol=1e-5)
        (event,) = result["resizes"]
        self.assertEqual(event["reason"], "lost_worker")
        self.assertEqual((event["old_size"], event["new_size"]), (3, 2))
        self.assertEqual(event["left"], [2])
        self.assertEqual(event["global_step"], 20)
        self.assertGreater(event["gap_seconds"], 0.0)
        self.assertGreaterEqual(event["stall_seconds"], 0.0)
        self.assertEqual(len(result["stats_resizes"]), 1)
        self.assertIn("lost worker [2]", output)
        self.assertIn("Elastic resizes:", output)
        self.assertIn("cannot follow a resize", result["per_worker_pipeline"])
        self.assertIn("cannot follow", result["sharded_pipeline"])

    def test_fewer_than_min_np_left_fails_within_the_timeout(self):
        elastic_timeout, grace = 5.0, 5.0
        with tempfile.TemporaryDirectory() as tmp:
            proc, _, slots_file = _run(
                tmp,
                "localhost:2",
                [
                    *("--min-np", "2", "--max-np", "2"),
                    *("--elastic-timeout", str(elastic_timeout)),
                    *("--grace_seconds", str(grace)),
                ],
                [
                    "--kill_rank=1",
                    "--kill_size=2",
                    "--kill_at_step=5",
                    "--slots_after=localhost:1",
                    "--step_sleep=0.2",
                ],
            )
            ended = time.time()
            killed = os.path.getmtime(slots_file)  # rank 1 wrote it, then died
        output = proc.stdout
        self.assertEqual(proc.returncode, 1, output[-4000:])
        self.assertIn(
            "1 worker(s) left (tasks [0]), fewer than --min-np 2", output
        )
        self.assertIn("reported 1 slot(s) for 5 s (--elastic-timeout)", output)
        # The wait, SIGTERM's grace and the launcher's start-up of the error.
        self.assertLess(ended - killed, elastic_timeout + grace + 15.0)

    def test_commits_wait_for_the_end_of_an_accumulation_cycle(self):
        # With 3 steps per cycle, the commits due at steps 10 and 20 fall
        # inside cycles, where each member's accumulators hold its own part
        # of the gradients (the lost worker's part would be lost): they
        # are skipped.
        _, result, rows = self._lose_rank_2_at_step_25("--accumulation=3")
        sizes = [r["size"] for r in rows]
        # Steps 10 and 20 fall inside cycles: the replay starts from the
        # commit of step 0.
        self.assertEqual(rows[sizes.index(2)]["batch"], 0)
        (event,) = result["resizes"]
        self.assertEqual(event["global_step"], 0)
        reference = self._reference(gradient_accumulation_steps=3)
        for got, want in zip(result["weights"], reference, strict=True):
            np.testing.assert_allclose(got, want, atol=1e-5)

    def _lose_rank_2_at_step_25(self, *worker_flags) -> tuple:
        """3 workers, commits every 10 steps, rank 2 SIGKILLed at its step
        25: the launcher's output, the chief's result and progress rows."""
        with tempfile.TemporaryDirectory() as tmp:
            proc, out_dir, _ = _run(
                tmp,
                "localhost:3",
                [
                    *("--min-np", "2", "--max-np", "3"),
                    *("--commit-interval", "10"),
                ],
                [
                    "--kill_rank=2",
                    "--kill_size=3",
                    "--kill_at_step=25",
                    "--step_sleep=0.05",
                    "--timeout_seconds=60",
                    *worker_flags,
                ],
            )
            output = proc.stdout
            self.assertEqual(proc.returncode, 0, output[-6000:])
            with open(os.path.join(out_dir, "rank0.pkl"), "rb") as f:
                result = pickle.load(f)
            return output, result, _progress(out_dir)

    def _reference(self, **optimizer) -> list:
        """Plain Keras in this process on the same global batches."""
        x, y = models.make_data(480)
        model = models.build_model("sequential", seed=100)
        models.compile_model(model, "adam", **optimizer)
        # Keras shuffles the arrays from this seed, as every rank does.
        keras.utils.set_random_seed(7)
        model.fit(x, y, batch_size=12, epochs=2, shuffle=True, verbose=0)
        return model.get_weights()


class ElasticLostWorkerTableTest(TestCase):
    """A lost worker's table rows and slots survive in its commit file (the
    default on one host; or served by the launcher, `--commit-store
    served`), or in its buddy copy (`--commit-store buddy`)."""

    def _run_table(self, kill_rank: int, extra: tuple = (), store="directory"):
        with tempfile.TemporaryDirectory() as tmp:
            proc, out_dir, _ = _run(
                tmp,
                "localhost:3",
                [
                    *("--min-np", "2", "--max-np", "3"),
                    *("--commit-interval", "10"),
                    *(
                        ("--commit-store", store)
                        if store != "directory"
                        else ()
                    ),
                ],
                [
                    "--model=table",
                    f"--kill_rank={kill_rank}",
                    "--kill_size=3",
                    "--kill_at_step=25",
                    "--step_sleep=0.05",
                    "--timeout_seconds=60",
                    *extra,
                ],
            )
            output = proc.stdout
            self.assertEqual(proc.returncode, 0, output[-6000:])
            with open(os.path.join(out_dir, "rank0.pkl"), "rb") as f:
                result = pickle.load(f)
            rows = _progress(out_dir)
        self.assertTrue(
            plan_text.partitioned(result["plan"], "table/embeddings"),
            result["plan"],
        )
        self.assertIn(
            {
                "buddy": "partitioned tables are committed with a buddy copy",
                "directory": "partitioned tables are committed to files "
                "under /",
                # On the launcher's host the workers write its folder
                # directly; the upload runs across hosts
                # (tests/launch/test_elastic_multihost.py).
                "served": "commits partitioned tables to files under "
                "'/dev/shm/",
            }[store],
            output,
        )
        reference = cases.table_reference(result["initial"])
        for got, want in zip(result["weights"], reference, strict=True):
            np.testing.assert_allclose(got, want, atol=1e-5)
        event = result["resizes"][0]
        self.assertEqual(event["reason"], "lost_worker")
        self.assertEqual(event["left"], [kill_rank])
        self.assertEqual(event["global_step"], 20)
        # 500 one-row virtual shards, 167/167/166 on the tasks: the buddy
        # takes the lost ones (333 there, 167 on the other survivor) and
        # the re-balance to 250/250 moves 83 of them, with Adam's m and v.
        row_bytes = 3 * 8 * 4
        self.assertEqual(event["table_bytes"], 83 * row_bytes)
        sizes = [r["size"] for r in rows]
        return [s for i, s in enumerate(sizes) if i == 0 or sizes[i - 1] != s]

    def test_middle_rank_lost_its_rows_come_from_its_file(self):
        # Its ids come as strings through a StringLookup in the dataset,
        # whose table lived in the eager context the recovery replaced.
        changes = self._run_table(kill_rank=1, extra=("--string_ids",))
        self.assertEqual(changes, [3, 2])

    def test_middle_rank_lost_its_rows_come_from_the_buddy_copy(self):
        self.assertEqual(self._run_table(kill_rank=1, store="buddy"), [3, 2])

    def test_last_rank_lost_its_rows_come_from_the_server_then_grows_back(
        self,
    ):
        # One run for all three (CI time): rank 2's rows come back to rank
        # 0 from the launcher's folder (the served store; every worker
        # shares the launcher's host here), and the lost slot is reported
        # again 5 steps after the recovery.
        changes = self._run_table(
            kill_rank=2,
            extra=("--slots_later=localhost:3", "--grow_after=5"),
            store="served",
        )
        self.assertEqual(changes, [3, 2, 3])

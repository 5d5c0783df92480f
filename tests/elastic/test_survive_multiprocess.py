"""Elastic jobs survive any lost worker, task 0 included, and two at once
(real processes, real SIGKILL): the short version of the soak.

Each test runs one scenario of `keras_hybrid.testing.soak` through
`keras-hybrid-run`: the soak's plain `fit` worker (a partitioned
`Embedding(400, 8)`, Adam, 3 epochs of 24 global batches) kills the
named ranks at the named moment, and the soak's runner judges the run
(`runner`): the final weights equal one process's on the same global
batches within 1e-5, every worker that died was killed by a fault, every
worker logged the same `logs["loss"]` at each epoch's end, every saved
model and sharded checkpoint reads back as the final state, and no
process of the job is left. The full soak (`make soak`) draws 30 such
runs at random.
"""

import json
import os
import tempfile

import pytest

from keras_hybrid.testing import TestCase
from keras_hybrid.testing.soak import runner
from keras_hybrid.testing.soak.faults import Fault
from keras_hybrid.testing.soak.scenario import Scenario

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(900)]
TIMEOUT = 400


class SurviveTest(TestCase):
    cache: dict = {}

    def _run(self, scenario):
        with tempfile.TemporaryDirectory() as root:
            record = runner.run_scenario(scenario, root, TIMEOUT, self.cache)
            out = os.path.join(root, scenario.name, "out")
            logs = _lines(os.path.join(out, "epoch_logs.jsonl"))
            with open(os.path.join(root, scenario.name, "output.log")) as f:
                self.output = f.read()
        self.assertEqual(
            record["outcome"],
            "survived",
            f"{record['why']}\n{record.get('output_tail', '')}",
        )
        self.assertEqual(len(record["fired"]), len(scenario.faults), record)
        return record, logs

    def test_task_0_lost_in_a_commit_rejoins_at_an_epochs_end(self):
        # Task 0, the collective leader, dies writing its commit of step
        # 10 (the served store; on the launcher's host a worker writes the
        # store's folder directly): the survivors agree on the commit
        # before it, under a new leader. Its slot goes with it and comes
        # back at step 24, where the chief holds the last step of epoch 0
        # until a new task 0 is planned in: it joins at the epoch's end,
        # however fast it starts, and must read the epoch's logs.
        record, logs = self._run(
            Scenario(
                name="leader",
                workers=3,
                max_np=3,
                store="served",
                faults=(
                    Fault(rank=0, step=10, moment="commit", drop_slot=True),
                ),
                slots_plan=((24, "localhost:3", True),),
            )
        )
        (fired,) = record["fired"]
        self.assertEqual((fired["task"], fired["size"]), (0, 3))
        self.assertIn("its file written, not renamed", fired["where"])
        at_end = [r for r in logs if r["epoch"] == 0 and r["size"] == 3]
        self.assertEqual(sorted(r["task"] for r in at_end), [0, 1, 2])
        self.assertEqual(len({r["loss"] for r in at_end}), 1, at_end)

    def test_two_lost_in_one_step_with_the_directory_store(self):
        # Task 0 and task 2 of 4 (not neighbours) die in the same step,
        # between two commits; the launcher loses both in one plan.
        record, _ = self._run(
            Scenario(
                name="two",
                workers=4,
                max_np=4,
                store="directory",
                faults=(
                    Fault(rank=0, step=33, moment="step", delay=0.0),
                    Fault(rank=2, step=33, moment="step", delay=0.01),
                ),
                checkpoint=True,
            )
        )
        self.assertEqual(sorted(f["task"] for f in record["fired"]), [0, 2])

    def test_two_neighbours_lost_with_two_buddy_copies(self):
        # Ranks 1 and 2 of 4 die in the same sharded checkpoint: with one
        # buddy copy, 1's rows would be lost with 2; two copies keep them
        # on 3 too. model.save runs at each epoch's end as well.
        record, _ = self._run(
            Scenario(
                name="buddies",
                workers=4,
                max_np=4,
                store="buddy",
                buddy_copies=2,
                faults=(
                    Fault(rank=1, step=40, moment="checkpoint"),
                    Fault(rank=2, step=40, moment="checkpoint"),
                ),
                checkpoint=True,
                save_model=True,
            )
        )
        self.assertEqual(
            [f["global_step"] for f in record["fired"]], [48, 48], record
        )

    def test_a_worker_lost_while_sending_its_buddy_copy(self):
        # Rank 1 of 3 dies in its commit of step 10, its blob written,
        # before its buddy got it: task 2 holds no copy of it, so the
        # survivors go on from the commit before (step 0).
        record, _ = self._run(
            Scenario(
                name="half-copy",
                workers=3,
                max_np=3,
                store="buddy",
                faults=(Fault(rank=1, step=10, moment="commit"),),
            )
        )
        (fired,) = record["fired"]
        self.assertEqual((fired["task"], fired["global_step"]), (1, 10))
        self.assertIn("its buddy blob written, not given", fired["where"])
        self.assertIn("resumes from the commit of global step 0", self.output)
        self.assertNotIn(
            "resumes from the commit of global step 10", self.output
        )

    def test_a_joiner_lost_in_a_grows_row_move(self):
        # 2 -> 3 at step 12: the joiner dies as the rows start to move; the
        # grow is cut short and the two members go on from their commit.
        record, _ = self._run(
            Scenario(
                name="grow",
                workers=2,
                max_np=3,
                store="directory",
                faults=(Fault(rank=2, step=12, moment="row_move"),),
                slots_plan=((12, "localhost:3", True),),
                save_model=True,
            )
        )
        (fired,) = record["fired"]
        self.assertIn("row move", fired["where"])
        self.assertEqual(fired["task"], 2)


def _lines(path: str) -> list:
    with open(path) as f:
        return [json.loads(line) for line in f if line.endswith("\n")]

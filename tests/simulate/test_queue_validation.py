"""The simulator's queueing and loss model against emulated runs.

`data/emulated_queues.json` holds the speed-ups over allgather measured
at 2, 4 and 8 emulated hosts with 10, 50 and 400 ms tbf queues, with the
commands that measured them; `data/lm20k_profile.json` is the profile of
their workload. Every predicted speed-up must be within 25% of the
measured one, and the companion tests show the check can fail.
"""

import copy
import json
import os
import tempfile
import unittest

from keras_hybrid.costs.profile import Profile
from keras_hybrid.simulate import queue_validation

DATA = os.path.join(os.path.dirname(__file__), "data")
RUNS = os.path.join(DATA, "emulated_queues.json")
BATCH = 32


def _profile() -> Profile:
    with open(os.path.join(DATA, "lm20k_profile.json")) as f:
        return Profile.from_json(f.read())


class QueueValidationTest(unittest.TestCase):
    def test_runs_cover_2_4_8_workers_and_10_50_400_ms(self):
        runs = queue_validation.load(RUNS)
        cases = {(r["workers"], r["tbf_queue_ms"]) for r in runs}
        self.assertEqual(
            cases, {(n, q) for n in (2, 4, 8) for q in (10, 50, 400)}
        )
        for run in runs:
            self.assertEqual(set(run["speedup"]), {"hybrid", "hybrid_rounds"})
            self.assertIn("--tbf_queue_ms=", run["command"])

    def test_every_prediction_is_within_25_percent(self):
        rows = queue_validation.compare(
            _profile(), queue_validation.load(RUNS), BATCH
        )
        self.assertEqual(len(rows), 18)
        self.assertEqual(
            queue_validation.outside(rows),
            [],
            msg="\n" + queue_validation.table(rows),
        )

    def test_shallow_queues_cost_the_concurrent_exchange_timeouts(self):
        rows = queue_validation.compare(
            _profile(), queue_validation.load(RUNS), BATCH
        )
        timeouts = {
            (r["workers"], r["tbf_queue_ms"], r["mode"]): r["queue_ms"]
            for r in rows
        }
        # Pull and push each wait one 200 ms timeout.
        self.assertEqual(timeouts[8, 10, "hybrid"], 400)
        self.assertEqual(timeouts[4, 10, "hybrid"], 400)
        self.assertEqual(timeouts[4, 50, "hybrid"], 0)
        self.assertEqual(timeouts[2, 10, "hybrid"], 0)
        for n in (2, 4, 8):
            for q in (10, 50, 400):
                self.assertEqual(timeouts[n, q, "hybrid_rounds"], 0)

    def test_check_fails_without_the_queueing_model(self):
        rows = queue_validation.compare(
            _profile(), queue_validation.load(RUNS), BATCH, queueing=False
        )
        bad = {
            (r["workers"], r["tbf_queue_ms"], r["mode"])
            for r in queue_validation.outside(rows)
        }
        self.assertIn((8, 10, "hybrid"), bad)
        self.assertTrue(all(mode == "hybrid" for _, _, mode in bad))

    def test_check_fails_on_a_measured_figure_off_by_a_third(self):
        runs = copy.deepcopy(queue_validation.load(RUNS))
        run = next(
            r for r in runs if (r["workers"], r["tbf_queue_ms"]) == (4, 400)
        )
        # Predicted within 1% of the measured 3.39.
        run["speedup"]["hybrid"] *= 1.35
        rows = queue_validation.compare(_profile(), runs, BATCH)
        bad = queue_validation.outside(rows)
        self.assertEqual(len(bad), 1)
        self.assertEqual(bad[0]["mode"], "hybrid")

    def test_table_names_every_case(self):
        rows = queue_validation.compare(
            _profile(), queue_validation.load(RUNS)[:1], BATCH
        )
        text = queue_validation.table(rows)
        self.assertIn("hybrid_rounds", text)
        self.assertIn("10ms", text)

    def test_file_without_runs_raises(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "runs.json")
            with open(path, "w") as f:
                json.dump({"runs": []}, f)
            with self.assertRaisesRegex(ValueError, "no `runs`"):
                queue_validation.load(path)
            with open(path, "w") as f:
                json.dump({"runs": [{"workers": 2}]}, f)
            with self.assertRaisesRegex(ValueError, "lacks"):
                queue_validation.load(path)


if __name__ == "__main__":
    unittest.main()

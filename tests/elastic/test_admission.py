"""`elastic_membership.admission`: which plan admits a joiner process.

The launcher's files of a job in which task 2 joined (generation 1), was
lost (generation 3), and a new process of task 2 waits to join again. The
first process's plan must not admit the second (it did: the new joiner
took generation 1's group, `[0, 2, 3]`, and hung or failed with
"2 is not in list").
"""

import json
import os
import tempfile

from keras_hybrid.contract.plan_channel import FileChannel
from keras_hybrid.elastic import membership
from keras_hybrid.testing import TestCase


def _write(directory: str, name: str, record: dict) -> None:
    with open(os.path.join(directory, name), "w") as f:
        json.dump(record, f)


def _plan(generation, members, joiners=()):
    return {
        "generation": generation,
        "members": members,
        "reason": "discovery",
        "joiners": list(joiners),
    }


class AdmissionTest(TestCase):
    def test_a_replaced_task_waits_for_its_own_plan(self):
        with tempfile.TemporaryDirectory() as d:
            _write(d, "plan-1.json", _plan(1, [0, 1, 2, 3], [2, 3]))
            _write(d, "plan-2.json", _plan(2, [0, 1, 2]))
            self.assertEqual(
                membership.admission(FileChannel(d), 2)["generation"], 1
            )
            _write(
                d,
                "recover-3.json",
                {"generation": 3, "members": [0, 1], "lost": [2]},
            )
            self.assertIsNone(membership.admission(FileChannel(d), 2))
            # Task 3 left in generation 2: no admission either.
            self.assertIsNone(membership.admission(FileChannel(d), 3))
            _write(d, "plan-4.json", _plan(4, [0, 1, 2], [2]))
            self.assertEqual(
                membership.admission(FileChannel(d), 2)["generation"], 4
            )
            self.assertIsNone(membership.admission(FileChannel(d), 3))

    def test_generations_are_read_in_numeric_order(self):
        with tempfile.TemporaryDirectory() as d:
            _write(d, "plan-10.json", _plan(10, [0, 1, 2], [1]))
            _write(
                d,
                "recover-9.json",
                {"generation": 9, "members": [0], "lost": [1]},
            )
            self.assertEqual(
                membership.admission(FileChannel(d), 1)["generation"],
                10,
            )

"""Elastic training with a `DynamicEmbedding`: grow, shrink, lost worker.

`workers/elastic_fit_worker.py --model=dynamic` (a `DynamicEmbedding`
over 64-bit keys, admitted at their second step, so waiting keys'
counts matter, beside a dense part) runs under `keras-hybrid-run
--min-np 2 --max-np 4` as `test_resize_multiprocess` drives it: 2 -> 4
(joiners receive their keys), 4 -> 3 (the leaver hands its keys over),
then a worker is SIGKILLed 5 steps after the shrink and the survivors
restore its keys from the last commit (3 -> 2), here with Adam and the
directory store, and with SGD (momentum), the buddy store and string
keys (`--model=dynamic_strings`), rank 2 lost. Every key, its row and
the dense layers must equal an uninterrupted run in one process within
1e-5 (the table's gradient made dense, the strategy's semantics), every
key must live on its owner, the counters must be the job's, and the
traced step must have run on through both planned resizes.
"""

import numpy as np
import pytest

from keras_hybrid.testing import TestCase
from tests.elastic.test_resize_multiprocess import _run_job
from tests.elastic.test_resize_multiprocess import cases

pytestmark = pytest.mark.multiprocess

ATOL = 1e-5


class ElasticDynamicEmbeddingTest(TestCase):
    def _check(
        self, optimizer: str, kill_rank: int, store: str, model="dynamic"
    ) -> None:
        output, result, sizes = _run_job(
            [
                f"--model={model}",
                f"--optimizer={optimizer}",
                f"--kill_rank={kill_rank}",
                *("--kill_size=3", "--kill_after=5"),
            ],
            flags=("--commit-store", store),
        )
        changes = [
            s for i, s in enumerate(sizes) if i == 0 or sizes[i - 1] != s
        ]
        self.assertEqual(changes, [2, 4, 3, 2], output[-4000:])
        reasons = [
            (r["reason"], r["old_size"], r["new_size"])
            for r in result["resizes"]
        ]
        self.assertEqual(
            reasons,
            [("discovery", 2, 4), ("discovery", 4, 3), ("lost_worker", 3, 2)],
        )
        # Keys moved at every change of the members.
        for event in result["resizes"]:
            self.assertGreater(event["table_bytes"], 0, event)
        want = cases.dynamic_reference(result["initial"], optimizer, name=model)
        keys = result["keys"].tolist()
        self.assertEqual(len(keys), len(set(keys)))  # each key on one worker
        self.assertEqual(sorted(keys), sorted(want["rows"]))
        self.assertTrue(result["on_owners"])
        self.assertEqual(result["shards"], [512, 512])
        got = np.stack(list(result["rows"]))
        expected = np.stack([want["rows"][k] for k in keys])
        np.testing.assert_allclose(got, expected, atol=ATOL, rtol=0)
        for g, w in zip(result["dense"], want["dense"], strict=True):
            np.testing.assert_allclose(g, w, atol=ATOL, rtol=0)
        stats = result["stats"]
        self.assertEqual(stats["rows"], len(keys))
        self.assertEqual(stats["admissions"], len(keys))
        self.assertEqual(stats["rejections"], 0)
        # One train step ran through the grow and the shrink; the
        # recovery traced it once more.
        self.assertEqual(result["traces"], [1, 1])

    def test_grow_shrink_and_lost_worker_equal_one_process(self):
        self._check("adam", kill_rank=1, store="directory")

    def test_string_keys_with_sgd_and_buddy_copies(self):
        # The rows of the lost rank come from a buddy's copy, not a file;
        # string keys move as their hashes.
        self._check("sgd", kill_rank=2, store="buddy", model="dynamic_strings")

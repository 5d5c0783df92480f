"""Where a lost member's dynamic-table keys go (`dynamic_shard._target`);
the restore itself runs in `test_dynamic_multiprocess.py`."""

import numpy as np

from keras_hybrid.elastic import dynamic_shard
from keras_hybrid.testing import TestCase


class TargetTest(TestCase):
    def test_lost_member_shards_go_to_survivors_moving_least(self):
        # Commit on tasks [0, 1, 2], task 1 lost, task 3 joined after.
        owners = tuple(v % 3 for v in range(1024))
        target = dynamic_shard._target(owners, [0, 1, 2], [0, 2, 3])
        self.assertEqual(target.num_workers, 3)
        kept = [
            v
            for v, (o, n) in enumerate(zip(owners, target.owners, strict=True))
            if o != 1 and [0, 1, 2][o] == [0, 2, 3][n]
        ]
        # Tasks 0 and 2 keep their shards; only task 1's are handed on.
        self.assertEqual(len(kept), 683)
        self.assertLessEqual(np.ptp(target.counts()), 1)

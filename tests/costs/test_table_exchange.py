"""A table's lookup calls in the fused exchange, by hand.

`sparse/fused_exchange.py` dedupes the ids of all of a table's calls
together and packs every table's rows into one block per pair and dtype,
padded once; the simulator must charge the same. Plain
`unittest.TestCase`: nothing here builds Keras objects.
"""

import unittest

import numpy as np

from keras_hybrid.costs import cost_model
from keras_hybrid.costs import table_exchange
from keras_hybrid.costs import traffic
from keras_hybrid.costs.cluster_spec import ClusterSpec
from keras_hybrid.costs.design import Design
from keras_hybrid.costs.profile import Profile
from keras_hybrid.costs.profile import VariableStats

ROWS, DIM = 100_000, 64
ROW_BYTES = 4 * DIM


def _table(path="emb", calls=1, table_unique=(), dim=DIM):
    return VariableStats(
        path=path,
        kind="sparse",
        shape=(ROWS, dim),
        dtype_bytes=4,
        index_bytes=8,
        lookups_per_sample=(20.0,) * calls,
        batch_sizes=(8, 16, 32),
        unique=((100.0, 180.0, 320.0),) * calls,
        table_unique=tuple(table_unique),
    )


def _profile(table):
    dense = VariableStats("kernel", "dense", (256, 256), 4)
    return Profile("toy", (table, dense), (8, 16, 32), (0.01, 0.02, 0.04))


class CallsTogetherTest(unittest.TestCase):
    def test_calls_together_follow_their_own_power_law(self):
        n = np.array([320, 640, 1280])  # 2 calls of 20 lookups per sample
        table = _table(calls=2, table_unique=tuple(2.0 * n**0.8))
        self.assertAlmostEqual(table.table_unique_ids(64), 2.0 * 2560**0.8)
        # Not measured (older profiles): the calls' sum, capped by rows.
        apart = _table(calls=2)
        self.assertAlmostEqual(
            apart.table_unique_ids(32), 2 * apart.unique_ids(32)
        )
        self.assertEqual(apart.table_unique_ids(10**6), ROWS)
        one = _table()
        self.assertEqual(one.table_unique_ids(32), one.unique_ids(32))
        with self.assertRaisesRegex(ValueError, "table_unique.*per batch"):
            _table(calls=2, table_unique=(1.0,))

    def test_a_tables_calls_are_deduped_together(self):
        # Two calls of 320 unique ids each at batch 32 that share ids:
        # 480 unique together. `sparse/fused_exchange.py` dedupes a
        # table's calls together, so the fused step moves 480, not 640.
        shared = _table(calls=2, table_unique=(150.0, 270.0, 480.0))
        profile = _profile(shared)
        spec = ClusterSpec(4)
        fused = cost_model.predict(profile, "hybrid", spec, 32)
        apart = cost_model.predict(
            profile, "hybrid", spec, 32, design=Design(fused=False)
        )
        # Owners are a multinomial draw: within 3% of (N - 1) / N.
        for got, unique in ((fused, 480), (apart, 640)):
            self.assertAlmostEqual(
                got.bytes["sparse_pull"] / (unique * ROW_BYTES),
                3 / 4,
                delta=0.03,
                msg=unique,
            )

    def test_packed_blocks_are_padded_as_one(self):
        # Tables of 64 and 128 floats travel in units of 64 floats (1 and
        # 2 units a row). Worker 0 serves worker 1 33 rows of a and 30 of
        # b: 93 units, on the ladder's step of 4 above 64 -> 96.
        # Worker 1 serves 40 + 2 * 20 = 80 units, a step: no padding.
        narrow, wide = _table("a"), _table("b", dim=2 * DIM)
        found = [
            [("flat", np.array([[[0, 40], [33, 0]]]))],
            [("flat", np.array([[[0, 20], [30, 0]]]))],
        ]
        got = table_exchange.fused_exchanges(
            [narrow, wide], found, Design("per_pair")
        )
        pulls = [e for e in got if "sparse_pull" in e.bytes]
        self.assertEqual(len(pulls), 1)
        self.assertEqual(pulls[0].bytes["padding"], (3 * ROW_BYTES + 0) / 2)
        self.assertEqual(
            pulls[0].bytes["sparse_pull"], (93 + 80) / 2 * ROW_BYTES
        )
        # Ids: 60 and 63 ids in one block each (steps of 2: 63 -> 64).
        (ids,) = [e for e in got if "ids" in e.bytes]
        self.assertEqual(ids.bytes["padding"], 8 / 2)
        # Per peer: 2 table counts, a flag, largest of ids and of floats.
        self.assertEqual(got[0].bytes["control"], 5 * 4)


class DynamicTableTest(unittest.TestCase):
    """A dynamic table's exchange as built: per lookup call, keys with
    their counts (16 bytes), not fused, not hierarchical, no hot rows."""

    def _var(self, dynamic: bool):
        return VariableStats(
            path="t",
            kind="sparse",
            shape=(100_000, 32),
            dtype_bytes=4,
            index_bytes=8,
            lookups_per_sample=(20.0,),
            batch_sizes=(32, 64),
            unique=((500.0, 900.0),),
            dynamic=dynamic,
        )

    def test_keys_cost_twice_an_id_and_stay_apart(self):
        design = Design(fused=True, hierarchical=True, hot_rows=100)
        static = table_exchange.hybrid_tables(
            [(self._var(False), 0)], 8, 64, Design(fused=False)
        )
        dynamic = table_exchange.hybrid_tables(
            [(self._var(True), 0)], 8, 64, design, per_host=2
        )
        got = {e.kind: e for e in dynamic}
        self.assertEqual(set(got), {e.kind for e in static})
        self.assertTrue(all(e.scope == "flat" for e in dynamic))
        sums = [traffic.bytes_per_path(x) for x in (static, dynamic)]
        self.assertEqual(sums[1]["ids"], 2 * sums[0]["ids"])
        for path in ("sparse_pull", "sparse_push", "control"):
            self.assertEqual(sums[1][path], sums[0][path], path)

    def test_a_dynamic_table_has_no_hot_rows_and_is_never_gathered(self):
        profile = Profile("p", (self._var(True),), (32, 64), (0.01, 0.02))
        for mode in ("hybrid", "allgather"):
            exchanges = traffic.step_exchanges(
                profile, mode, 8, 64, design=Design(hot_rows=100)
            )
            self.assertEqual({e.kind for e in exchanges}, {"all_to_all"}, mode)

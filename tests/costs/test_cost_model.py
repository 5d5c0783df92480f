"""The cost model's formulas, limits and monotonic properties, by hand.

Plain `unittest.TestCase`: nothing here builds Keras objects.
"""

import dataclasses
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


def _table(
    unique=(100.0, 180.0, 320.0), lookups=20.0, calls=1, table_unique=()
):
    return VariableStats(
        path="emb",
        kind="sparse",
        shape=(ROWS, DIM),
        dtype_bytes=4,
        index_bytes=8,
        lookups_per_sample=(lookups,) * calls,
        batch_sizes=(8, 16, 32),
        unique=(tuple(unique),) * calls,
        table_unique=tuple(table_unique),
    )


def _profile(dense_shapes=((64, 64), (64,)), **table_kwargs):
    dense = tuple(
        VariableStats(f"d{i}", "dense", shape, 4)
        for i, shape in enumerate(dense_shapes)
    )
    return Profile(
        name="toy",
        variables=(_table(**table_kwargs), *dense),
        batch_sizes=(8, 16, 32),
        compute_seconds=(0.010, 0.020, 0.040),
    )


class ProfileTest(unittest.TestCase):
    def test_heaps_fit_recovers_an_exact_power_law(self):
        n = np.array([160, 320, 640])  # 20 lookups per sample
        table = _table(unique=tuple(3.0 * n**0.7))
        k, beta = table.heaps_fit()
        self.assertAlmostEqual(k, 3.0, places=6)
        self.assertAlmostEqual(beta, 0.7, places=6)
        self.assertAlmostEqual(table.unique_ids(64), 3.0 * 1280**0.7)

    def test_unique_ids_never_exceed_lookups_or_rows(self):
        table = _table(unique=(160.0, 320.0, 640.0))  # all distinct
        self.assertEqual(table.unique_ids(1000), 20_000)
        self.assertEqual(table.unique_ids(10**6), ROWS)

    def test_compute_time_is_linear_in_the_batch(self):
        self.assertAlmostEqual(_profile().compute_time(64), 0.080)

    def test_json_round_trip(self):
        profile = _profile(calls=2, table_unique=(150.0, 270.0, 480.0))
        self.assertEqual(Profile.from_json(profile.to_json()), profile)

    def test_rejects_a_foreign_json(self):
        with self.assertRaisesRegex(ValueError, "Not a simulator profile"):
            Profile.from_json('{"workload": "lm"}')

    def test_rejects_counts_that_do_not_match_the_batch_sizes(self):
        with self.assertRaisesRegex(ValueError, "one count per batch size"):
            dataclasses.replace(_table(), unique=((1.0, 2.0),))
        with self.assertRaisesRegex(ValueError, "`kind` must be one of"):
            dataclasses.replace(_table(), kind="table")


class BytesTest(unittest.TestCase):
    def test_one_worker_sends_nothing(self):
        for mode in traffic.MODES:
            p = cost_model.predict(_profile(), mode, ClusterSpec(1), 32)
            self.assertEqual(p.bytes["total"], 0, mode)
            self.assertEqual(p.comm_seconds, 0, mode)

    def test_dense_mode_is_a_ring_all_reduce_of_everything(self):
        profile = _profile()
        total = ROWS * ROW_BYTES + (64 * 64 + 64) * 4
        for n in (2, 8, 64):
            got = cost_model.predict(
                profile, "dense", ClusterSpec(n), 32, bucket_bytes=2**40
            ).bytes
            self.assertEqual(got["dense"], 2 * (n - 1) * total // n)
            self.assertEqual(got["total"], got["dense"])

    def test_buckets_split_by_size_and_dtype(self):
        variables = [
            VariableStats("a", "dense", (100,), 4),
            VariableStats("b", "dense", (100,), 2),
            VariableStats("c", "dense", (100,), 4),
            VariableStats("d", "dense", (100,), 4),
        ]
        self.assertEqual(traffic.dense_buckets(variables, 800), [800, 200, 400])

    def test_allgather_grows_with_workers_and_has_no_dedupe(self):
        profile = _profile()
        lookups = 20 * 32
        for n in (2, 16, 256):
            got = cost_model.predict(profile, "allgather", ClusterSpec(n), 32)
            self.assertEqual(
                got.bytes["sparse_push"], (n - 1) * lookups * ROW_BYTES
            )
            self.assertEqual(got.bytes["ids"], (n - 1) * lookups * 8)

    def test_hybrid_payload_is_the_remote_share_of_2ur(self):
        profile = _profile()
        u = profile.of_kind("sparse")[0].unique_ids(32)
        for n in (2, 4, 64):
            got = cost_model.predict(profile, "hybrid", ClusterSpec(n), 32)
            payload = sum(
                got.bytes[p] for p in ("sparse_pull", "sparse_push", "ids")
            )
            bound = (2 * ROW_BYTES + 8) * u
            # Owners are a multinomial draw: within 3% of (N - 1) / N.
            self.assertAlmostEqual(
                payload / bound, (n - 1) / n, delta=0.03, msg=n
            )
            self.assertGreaterEqual(got.bytes["padding"], 0)

    def test_control_of_a_lookup_is_o_of_n(self):
        counts = np.array([[7, 40, 3], [33, 0, 64], [50, 1, 2]])
        got = table_exchange.exchange_bytes(counts, ROW_BYTES, "max_pair")
        # Every block is padded to the ladder step of 64, the largest count.
        sent, served = 40 + 3, 33 + 50
        self.assertEqual(
            got["padding"][0],
            (128 - sent) * (8 + ROW_BYTES) + (128 - served) * ROW_BYTES,
        )
        # Per pair (the default, as the TF engine sends): counts up to 32
        # are exact, 33..64 go to steps of 2 (40 -> 40, 33 -> 34, 50 -> 50).
        got = table_exchange.exchange_bytes(counts, ROW_BYTES)
        self.assertEqual(got["padding"][0], (34 - 33) * ROW_BYTES)
        self.assertEqual(got["slots"].tolist(), [43, 98, 51])
        # Three int32 per peer: count, flag and largest count.
        self.assertEqual(got["control"].tolist(), [24, 24, 24])
        apart = Design(fused=False)
        for n in (4, 64, 256):
            spec = ClusterSpec(n)
            got = cost_model.predict(
                _profile(), "hybrid", spec, 32, design=apart
            )
            self.assertEqual(got.bytes["control"], (n - 1) * 12, msg=n)
            # Fused (`plan_packed_exchange`): per peer a count per table,
            # the flag, and the largest count of ids and of each dtype.
            got = cost_model.predict(_profile(), "hybrid", spec, 32)
            self.assertEqual(got.bytes["control"], (n - 1) * 16, msg=n)

    def test_each_lookup_call_pulls_and_pushes_its_own_ids(self):
        one = cost_model.predict(_profile(), "hybrid", ClusterSpec(4), 32)
        two = cost_model.predict(
            _profile(calls=2), "hybrid", ClusterSpec(4), 32
        )
        self.assertAlmostEqual(
            two.bytes["sparse_pull"], 2 * one.bytes["sparse_pull"], delta=1e3
        )
        gather = cost_model.predict(
            _profile(calls=2), "allgather", ClusterSpec(4), 32
        )
        self.assertEqual(gather.bytes["ids"], 3 * 2 * 20 * 32 * 8)

    def test_hybrid_beats_allgather_and_dense_on_a_big_table(self):
        for n in (8, 64, 256):
            spec = ClusterSpec(n, accelerators_per_host=8)
            got = {
                m: cost_model.predict(_profile(), m, spec, 32)
                for m in traffic.MODES
            }
            for other in ("allgather", "dense"):
                self.assertLess(
                    got["hybrid"].bytes["total"], got[other].bytes["total"]
                )
                self.assertLess(
                    got["hybrid"].comm_seconds, got[other].comm_seconds
                )

    def test_a_table_with_fewer_rows_than_workers_is_all_gathered(self):
        tiny = dataclasses.replace(
            _table(unique=(4.0, 4.0, 4.0)), shape=(4, DIM)
        )
        profile = dataclasses.replace(_profile(), variables=(tiny,))
        got = cost_model.predict(profile, "hybrid", ClusterSpec(8), 32).bytes
        self.assertEqual(got["sparse_push"], 7 * 20 * 32 * ROW_BYTES)
        self.assertEqual(got["sparse_pull"], 0)


class TimeTest(unittest.TestCase):
    def test_ring_all_reduce_time_by_hand(self):
        spec = ClusterSpec(4, inter_bandwidth=1e9, inter_latency=1e-4)
        exchange = traffic.all_reduce(8e6, 4)
        # 6 rounds of 2 MB at 1 GB/s plus 6 latencies.
        self.assertAlmostEqual(
            cost_model.exchange_seconds(exchange, spec), 6 * (1e-4 + 2e-3)
        )

    def test_time_falls_with_bandwidth_to_the_latency_floor(self):
        profile = _profile()
        times = [
            cost_model.predict(
                profile,
                "hybrid",
                ClusterSpec(16, inter_bandwidth=bw, inter_latency=0.0),
                32,
            ).comm_seconds
            for bw in (1e8, 1e9, 1e10, 1e15)
        ]
        self.assertEqual(times, sorted(times, reverse=True))
        self.assertLess(times[-1], 1e-6)

    def test_hosts_share_one_interface(self):
        # Same 16 workers: 16 hosts of 1, or 2 hosts of 8 sharing a link
        # (with an in-host link as slow as the network and no latency, to
        # isolate it): 8 workers share what 1 sent, k (N - k) / (N - 1).
        slow = dict(
            inter_bandwidth=1e9,
            intra_bandwidth=1e9,
            inter_latency=0.0,
            intra_latency=0.0,
        )
        spread = ClusterSpec(16, 1, **slow)
        packed = ClusterSpec(16, 8, **slow)
        tables_only = _profile(dense_shapes=())
        a = cost_model.predict(tables_only, "hybrid", spread, 32)
        b = cost_model.predict(tables_only, "hybrid", packed, 32)
        self.assertAlmostEqual(
            b.comm_seconds / a.comm_seconds, 8 * 8 / 15, delta=0.1
        )

    def test_ps_hot_spot_on_one_big_dense_variable(self):
        # One 40 MB dense variable lives on one shard: its host serves all.
        big = _profile(dense_shapes=((10_000_000,),))
        even = _profile(dense_shapes=((625_000,),) * 16)
        spec = ClusterSpec(16, 1, inter_latency=0.0)
        ps_big = cost_model.predict(big, "ps_only", spec, 32)
        ring_big = cost_model.predict(big, "hybrid", spec, 32)
        ps_even = cost_model.predict(even, "ps_only", spec, 32)
        self.assertEqual(ps_big.bytes["dense"], ps_even.bytes["dense"])
        self.assertGreater(ps_big.comm_seconds, 5 * ring_big.comm_seconds)
        self.assertLess(ps_even.comm_seconds, 1.5 * ring_big.comm_seconds)

    def test_greedy_placement_balances_by_size(self):
        variables = [
            VariableStats(str(i), "dense", (s,), 1)
            for i, s in enumerate((5, 4, 3, 3, 1))
        ]
        self.assertEqual(traffic.greedy_shards(variables, 2), (8.0, 8.0))

    def test_rejects_an_unknown_mode(self):
        with self.assertRaisesRegex(ValueError, "`mode` must be one of"):
            cost_model.predict(_profile(), "horovod", ClusterSpec(2), 32)


class PsLayoutTest(unittest.TestCase):
    """`ps_only` with one server and one process per host."""

    SPEC = ClusterSpec(
        8, 4, inter_bandwidth=1e8, inter_latency=1e-4, intra_latency=1e-5
    )

    def test_per_host_is_flat_ps_among_hosts_plus_local_aggregation(self):
        profile = _profile(dense_shapes=((1_000_000,), (64, 64)))
        k, hosts, batch = 4, 2, 8
        per_host = cost_model.predict(
            profile, "ps_only", self.SPEC, batch, ps_layout="per_host"
        )
        host_spec = ClusterSpec(
            hosts, 1, inter_bandwidth=1e8, inter_latency=1e-4
        )
        among_hosts = cost_model.predict(
            profile, "ps_only", host_spec, k * batch
        )
        dense = 4 * (1_000_000 + 64 * 64)
        rows = profile.variables[0].unique_ids(batch) * ROW_BYTES
        local = (
            2
            * (k - 1)
            * (self.SPEC.intra_latency + dense / k / self.SPEC.intra_bandwidth)
            + (k - 1) * rows / self.SPEC.intra_bandwidth
        )
        self.assertAlmostEqual(
            per_host.comm_seconds, among_hosts.comm_seconds + local
        )
        self.assertEqual(per_host.bytes, among_hosts.bytes)

    def test_local_aggregation_removes_the_per_accelerator_hot_spot(self):
        # A 4 MB variable on one shard: per accelerator, 7 others pull it
        # (4 of them across hosts); per host, one other host does.
        profile = _profile(dense_shapes=((1_000_000,),))
        flat = cost_model.predict(profile, "ps_only", self.SPEC, 8)
        per_host = cost_model.predict(
            profile, "ps_only", self.SPEC, 8, ps_layout="per_host"
        )
        self.assertLess(2 * per_host.comm_seconds, flat.comm_seconds)

    def test_one_accelerator_per_host_changes_nothing(self):
        spec = ClusterSpec(4, 1)
        a = cost_model.predict(_profile(), "ps_only", spec, 8)
        b = cost_model.predict(
            _profile(), "ps_only", spec, 8, ps_layout="per_host"
        )
        self.assertEqual(a, b)

    def test_other_modes_ignore_the_layout(self):
        a = cost_model.predict(_profile(), "hybrid", self.SPEC, 8)
        b = cost_model.predict(
            _profile(), "hybrid", self.SPEC, 8, ps_layout="per_host"
        )
        self.assertEqual(a, b)

    def test_rejects_an_unknown_layout(self):
        with self.assertRaisesRegex(ValueError, "`ps_layout` must be one"):
            cost_model.predict(
                _profile(), "ps_only", self.SPEC, 8, ps_layout="per_rack"
            )

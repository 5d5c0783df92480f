"""`PortBuffer`: flows into a port, loss and late timeouts, by hand.

Plain `unittest.TestCase`: nothing here builds Keras objects.
"""

import unittest

from keras_hybrid.costs import cost_model
from keras_hybrid.costs.cluster_spec import ClusterSpec
from keras_hybrid.costs.design import Design
from keras_hybrid.costs.exchange import Exchange
from keras_hybrid.costs.port_buffer import PortBuffer
from keras_hybrid.costs.profile import Profile
from keras_hybrid.costs.profile import VariableStats

# 8 hosts of one worker, 1 MB/s links: 70 kB to each of 7 peers.
SPEC = ClusterSpec(workers=8, inter_bandwidth=1e6, inter_latency=0.0)
ALL_TO_ALL = Exchange("all_to_all", {"sparse_pull": 490e3}, 490e3)


class FlowsTest(unittest.TestCase):
    def test_concurrent_all_to_all_has_a_flow_per_peer(self):
        port = PortBuffer(100e3)
        self.assertEqual(port.flows(ALL_TO_ALL, SPEC), (7, 70e3))

    def test_rounds_have_one_sender_per_receiver(self):
        port = PortBuffer(100e3)
        self.assertEqual(port.flows(ALL_TO_ALL, SPEC, "rounds"), (1, 70e3))

    def test_host_port_carries_every_local_workers_off_host_flows(self):
        spec = ClusterSpec(workers=8, accelerators_per_host=4)
        port = PortBuffer(100e3)
        # 4 workers, each with 4 peers on the other host.
        self.assertEqual(port.flows(ALL_TO_ALL, spec), (16, 70e3))
        self.assertEqual(port.flows(ALL_TO_ALL, spec, "rounds"), (4, 70e3))

    def test_ring_is_one_flow(self):
        port = PortBuffer(100e3)
        reduce = Exchange("all_reduce", {"dense": 1.0}, 800e3)
        gather = Exchange("all_gather", {"sparse_push": 1.0}, 30e3)
        self.assertEqual(port.flows(reduce, SPEC), (1, 100e3))
        self.assertEqual(port.flows(gather, SPEC), (1, 30e3))

    def test_one_host_crosses_no_port(self):
        spec = ClusterSpec(workers=8, accelerators_per_host=8)
        self.assertEqual(PortBuffer(1.0).flows(ALL_TO_ALL, spec), (0, 0.0))


class TimeoutTest(unittest.TestCase):
    # 10 MB/s links: a queue of 300 kB drains in 30 ms.
    FAST = ClusterSpec(workers=8, inter_bandwidth=10e6, inter_latency=0)

    def test_burst_beyond_the_buffer_costs_one_timeout(self):
        # 7 flows x min(70 kB, 40 kB) = 280 kB into 250 kB.
        port = PortBuffer(250e3, flight_bytes=40e3, rto=0.2)
        self.assertEqual(port.exchange_seconds(ALL_TO_ALL, self.FAST), 0.2)

    def test_burst_within_the_buffer_costs_nothing(self):
        port = PortBuffer(300e3, flight_bytes=40e3)
        self.assertEqual(port.exchange_seconds(ALL_TO_ALL, self.FAST), 0.0)

    def test_queue_longer_than_the_timeout_costs_one_timeout(self):
        # No loss (280 kB < 300 kB), but 0.28 s in the queue at 1 MB/s.
        port = PortBuffer(300e3, flight_bytes=40e3)
        self.assertEqual(port.exchange_seconds(ALL_TO_ALL, SPEC), 0.2)

    def test_rounds_stay_within_the_buffer(self):
        # 280 kB concurrent, 40 kB in rounds (0.04 s at 1 MB/s).
        port = PortBuffer(100e3, flight_bytes=40e3)
        self.assertEqual(port.exchange_seconds(ALL_TO_ALL, SPEC), 0.2)
        self.assertEqual(port.exchange_seconds(ALL_TO_ALL, SPEC, "rounds"), 0.0)

    def test_small_blocks_are_their_own_burst(self):
        ids = Exchange("all_to_all", {"ids": 7e3}, 7e3)
        # 7 flows x 1 kB = 7 kB < 10 kB.
        self.assertEqual(PortBuffer(10e3).exchange_seconds(ids, SPEC), 0.0)

    def test_bad_values_raise(self):
        with self.assertRaisesRegex(ValueError, "buffer_bytes"):
            PortBuffer(0)
        with self.assertRaisesRegex(ValueError, "flight_bytes"):
            PortBuffer(1.0, flight_bytes=-1)
        with self.assertRaisesRegex(ValueError, "rto"):
            PortBuffer(1.0, rto=-0.1)


def _profile():
    table = VariableStats(
        path="emb",
        kind="sparse",
        shape=(100_000, 64),
        dtype_bytes=4,
        index_bytes=8,
        lookups_per_sample=(20.0,),
        batch_sizes=(8, 16, 32),
        unique=((100.0, 180.0, 320.0),),
    )
    dense = VariableStats("d", "dense", (64, 64), 4)
    return Profile("toy", (table, dense), (8, 16, 32), (0.01, 0.02, 0.04))


class PredictTest(unittest.TestCase):
    def test_queue_seconds_add_to_communication(self):
        spec = ClusterSpec(workers=8, inter_bandwidth=1e6, inter_latency=0)
        deep = cost_model.predict(_profile(), "hybrid", spec, 32)
        shallow = cost_model.predict(
            _profile(), "hybrid", spec, 32, buffer=PortBuffer(1e3)
        )
        self.assertEqual(deep.queue_seconds, 0.0)
        # Ids, pull, push and the ring (a 16 kB bucket: one flow of 2 kB
        # per ring step) overrun 1 kB: one timeout each. The count
        # exchange (7 flows of 16 bytes) does not.
        self.assertAlmostEqual(shallow.queue_seconds, 4 * 0.2)
        self.assertAlmostEqual(
            shallow.comm_seconds, deep.comm_seconds + shallow.queue_seconds
        )
        self.assertEqual(shallow.bytes, deep.bytes)

    def test_rounds_pay_a_round_trip_per_round_and_no_timeout(self):
        spec = ClusterSpec(workers=8, inter_bandwidth=1e6, inter_latency=1e-3)
        rounds = Design(schedule="rounds")
        concurrent = cost_model.predict(_profile(), "hybrid", spec, 32)
        in_rounds = cost_model.predict(
            _profile(), "hybrid", spec, 32, design=rounds
        )
        self.assertEqual(in_rounds.bytes, concurrent.bytes)
        # Only the all-to-alls' latency doubles; the ring's does not.
        ring = 2 * 7 * 1e-3
        self.assertAlmostEqual(
            in_rounds.latency_seconds - ring,
            2 * (concurrent.latency_seconds - ring),
        )
        port = PortBuffer(100e3)
        lossy = cost_model.predict(
            _profile(), "hybrid", spec, 32, buffer=port, design=rounds
        )
        self.assertEqual(lossy.queue_seconds, 0.0)


if __name__ == "__main__":
    unittest.main()

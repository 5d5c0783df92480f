import unittest

import pytest

from keras_hybrid.contract.worker_spec import WorkerSpec
from keras_hybrid.launch import topology

pytestmark = pytest.mark.timeout(30)


class FreePortsTest(unittest.TestCase):
    def test_ports_are_distinct(self):
        ports = topology.free_ports(8)
        self.assertEqual(len(set(ports)), 8)
        self.assertTrue(all(0 < port < 65536 for port in ports))


class LocalSpecsTest(unittest.TestCase):
    def test_all_on_loopback(self):
        specs = topology.local_specs([5001, 5002])
        self.assertEqual(
            specs,
            [
                WorkerSpec(0, 2, 0, 2, "127.0.0.1", 5001),
                WorkerSpec(1, 2, 1, 2, "127.0.0.1", 5002),
            ],
        )
        self.assertEqual(specs[1].address, "127.0.0.1:5002")


class HostSpecsTest(unittest.TestCase):
    def test_ranks_fill_hosts_in_order(self):
        specs = topology.host_specs([("h1", 2), ("h2", 2)], 29400)
        self.assertEqual(
            [(s.rank, s.host, s.local_rank, s.port) for s in specs],
            [
                (0, "h1", 0, 29400),
                (1, "h1", 1, 29401),
                (2, "h2", 0, 29400),
                (3, "h2", 1, 29401),
            ],
        )
        self.assertEqual({s.size for s in specs}, {4})
        self.assertEqual({s.local_size for s in specs}, {2})

    def test_uneven_slots(self):
        specs = topology.host_specs([("h1", 1), ("h2", 3)], 100)
        self.assertEqual([s.local_size for s in specs], [1, 3, 3, 3])
        self.assertEqual([s.local_rank for s in specs], [0, 0, 1, 2])

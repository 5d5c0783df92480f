"""`EmulatedHosts` options that need neither root nor sshd."""

import unittest

from keras_hybrid.emulation.hosts import EmulatedHosts


class EmulatedHostsOptionsTest(unittest.TestCase):
    def test_tbf_queue_reaches_the_links(self):
        # The benchmark's --tbf_queue_ms must size the hosts' token buckets
        # too, not only those of one namespace per worker.
        hosts = EmulatedHosts(["a", "b"], "1gbit", tbf_queue_ms=400)
        self.assertEqual(hosts.network.tbf_queue_ms, 400)
        self.assertEqual(EmulatedHosts(["a"], "1gbit").network.tbf_queue_ms, 50)

    def test_tbf_queue_must_be_positive(self):
        with self.assertRaisesRegex(ValueError, "tbf_queue_ms.*Received: 0"):
            EmulatedHosts(["a", "b"], "1gbit", tbf_queue_ms=0)


if __name__ == "__main__":
    unittest.main()

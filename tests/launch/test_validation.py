import unittest

import pytest

from keras_hybrid.launch import validation

pytestmark = pytest.mark.timeout(30)


class CheckNumProcessesTest(unittest.TestCase):
    def test_accepts_positive(self):
        self.assertEqual(validation.check_num_processes(1), 1)

    def test_rejects_zero_and_negative(self):
        for value in (0, -3):
            with self.assertRaisesRegex(
                ValueError,
                rf"`-np` must be >= 1\. Received: -np {value}\.",
            ):
                validation.check_num_processes(value)


class CheckThreadsTest(unittest.TestCase):
    def test_none_means_default(self):
        self.assertIsNone(validation.check_threads(None))

    def test_rejects_zero(self):
        with self.assertRaisesRegex(
            ValueError, r"`--threads` must be >= 1\. Received: --threads 0\."
        ):
            validation.check_threads(0)


class CheckSecondsTest(unittest.TestCase):
    def test_rejects_negative(self):
        with self.assertRaisesRegex(
            ValueError, r"`--timeout` must be >= 0\. Received: --timeout -1\."
        ):
            validation.check_seconds("--timeout", -1.0)

    def test_accepts_zero_and_none(self):
        self.assertEqual(validation.check_seconds("--timeout", 0.0), 0.0)
        self.assertIsNone(validation.check_seconds("--timeout", None))


class CheckPortTest(unittest.TestCase):
    def test_rejects_ports_past_65535(self):
        with self.assertRaisesRegex(
            ValueError, r"Received: --port 65535 with 2 workers on one host"
        ):
            validation.check_port(65535, 2)

    def test_rejects_port_zero(self):
        with self.assertRaisesRegex(ValueError, r"Received: --port 0"):
            validation.check_port(0, 1)


class ParseHostsTest(unittest.TestCase):
    def test_parses_in_order(self):
        self.assertEqual(
            validation.parse_hosts("h1:2, h2:3"), [("h1", 2), ("h2", 3)]
        )

    def test_malformed_entries(self):
        cases = {
            "h1:": "entry 'h1:' is malformed",
            ":2": "entry ':2' is malformed",
            "h1": "entry 'h1' is malformed",
            "h1:2,": "entry '' is malformed",
            "h1:x": "slots in 'h1:x' are not an integer",
            "h1:0": "slots in 'h1:0' are < 1",
            "h1:-1": "slots in 'h1:-1' are < 1",
            "": "the list is empty",
            " ": "the list is empty",
        }
        for hosts, problem in cases.items():
            with self.subTest(hosts=hosts):
                with self.assertRaisesRegex(
                    ValueError,
                    r"`--hosts` must look like `h1:2,h2:2` .*"
                    + rf"but {problem}\. Received: --hosts '{hosts}'\.",
                ):
                    validation.parse_hosts(hosts)

    def test_rejects_duplicate_host(self):
        with self.assertRaisesRegex(ValueError, r"host 'h1' appears twice"):
            validation.parse_hosts("h1:1,h2:1,h1:1")

    def test_rejects_localhost_mixed_with_remote(self):
        with self.assertRaisesRegex(
            ValueError, r"'localhost' is mixed with remote hosts"
        ):
            validation.parse_hosts("localhost:1,h2:1")


class ResolveNumProcessesTest(unittest.TestCase):
    def test_np_alone(self):
        self.assertEqual(validation.resolve_num_processes(3, None), 3)

    def test_hosts_alone(self):
        hosts = [("h1", 2), ("h2", 2)]
        self.assertEqual(validation.resolve_num_processes(None, hosts), 4)

    def test_both_consistent(self):
        hosts = [("h1", 2), ("h2", 2)]
        self.assertEqual(validation.resolve_num_processes(4, hosts), 4)

    def test_both_inconsistent(self):
        with self.assertRaisesRegex(
            ValueError,
            r"`-np` must equal the number of slots in `--hosts`\. "
            r"Received: -np 3 with 4 slots\.",
        ):
            validation.resolve_num_processes(3, [("h1", 2), ("h2", 2)])

    def test_neither(self):
        with self.assertRaisesRegex(
            ValueError, r"One of `-np`, `--hosts` or `--slurm` is required"
        ):
            validation.resolve_num_processes(None, None)

    def test_np_zero(self):
        with self.assertRaisesRegex(ValueError, r"Received: -np 0\."):
            validation.resolve_num_processes(0, None)


class ParseEnvPairsTest(unittest.TestCase):
    def test_parses_and_keeps_equals_in_value(self):
        self.assertEqual(
            validation.parse_env_pairs(["A=1", "B=x=y", "A=2", "C="]),
            {"A": "2", "B": "x=y", "C": ""},
        )

    def test_none(self):
        self.assertEqual(validation.parse_env_pairs(None), {})

    def test_rejects_missing_equals_or_key(self):
        for pair in ("NOVALUE", "=1"):
            with self.subTest(pair=pair):
                with self.assertRaisesRegex(
                    ValueError,
                    rf"`--env` must look like KEY=VALUE\. "
                    rf"Received: --env '{pair}'\.",
                ):
                    validation.parse_env_pairs([pair])


class CheckCommandTest(unittest.TestCase):
    def test_strips_separator(self):
        self.assertEqual(
            validation.check_command(["--", "python", "-V"]), ["python", "-V"]
        )

    def test_rejects_empty(self):
        for command in ([], ["--"]):
            with self.subTest(command=command):
                with self.assertRaisesRegex(
                    ValueError, r"A command to run is required\."
                ):
                    validation.check_command(command)

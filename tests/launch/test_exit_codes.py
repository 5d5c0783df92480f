import unittest

import pytest

from keras_hybrid.launch import exit_codes

pytestmark = pytest.mark.timeout(30)


class ExitCodesTest(unittest.TestCase):
    def test_exit_code_for(self):
        self.assertEqual(exit_codes.exit_code_for(0), 0)
        self.assertEqual(exit_codes.exit_code_for(3), 3)
        self.assertEqual(exit_codes.exit_code_for(-9), 137)
        self.assertEqual(exit_codes.exit_code_for(-15), 143)

    def test_describe_returncode(self):
        self.assertEqual(exit_codes.describe_returncode(3), "code 3")
        self.assertEqual(
            exit_codes.describe_returncode(-9), "code -9 (killed by SIGKILL)"
        )
        self.assertEqual(exit_codes.signal_name(99), "signal 99")

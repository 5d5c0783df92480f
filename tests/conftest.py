"""Suite-wide settings.

Tests read every rank's lines from the launcher's console, so the
launcher shows them all (`--console-ranks all`); the tests of the
console's default set the variable back themselves. The shared pools of
worker processes stop when the session ends (`keras_hybrid.testing.pool`).
"""

import os

from keras_hybrid.testing import pool

os.environ.setdefault("KERAS_HYBRID_CONSOLE_RANKS", "all")


def pytest_sessionfinish(session, exitstatus):
    del session, exitstatus
    pool.close_pools()

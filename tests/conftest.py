"""Session-wide: the shared pools of worker processes stop when the
session ends (`keras_hybrid.testing.pool`)."""

from keras_hybrid.testing import pool


def pytest_sessionfinish(session, exitstatus):
    del session, exitstatus
    pool.close_pools()

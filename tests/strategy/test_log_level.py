"""The library's INFO lines show in a plain script: `HybridStrategy` sets
absl's verbosity from `KERAS_HYBRID_LOG_LEVEL`, INFO when unset."""

import logging

import pytest
from absl import logging as absl_logging

from keras_hybrid.strategy import log_level


@pytest.fixture(autouse=True)
def restore_logging():
    verbosity = absl_logging.get_verbosity()
    handlers = list(logging.getLogger().handlers)
    yield
    absl_logging.set_verbosity(verbosity)
    logging.getLogger().handlers[:] = handlers


def test_unset_shows_info_unless_a_flag_chose():
    absl_logging.set_verbosity(absl_logging.WARNING)
    log_level.apply({})
    assert absl_logging.get_verbosity() == absl_logging.INFO


def test_the_variable_wins():
    absl_logging.set_verbosity(absl_logging.INFO)
    log_level.apply({"KERAS_HYBRID_LOG_LEVEL": "WARNING"})
    assert absl_logging.get_verbosity() == absl_logging.WARNING
    log_level.apply({"KERAS_HYBRID_LOG_LEVEL": "debug"})
    assert absl_logging.get_verbosity() == absl_logging.DEBUG


def test_a_verbosity_already_set_to_info_or_more_is_kept():
    absl_logging.set_verbosity(absl_logging.DEBUG)
    log_level.apply({})
    assert absl_logging.get_verbosity() == absl_logging.DEBUG


def test_unknown_level_is_an_error():
    with pytest.raises(ValueError, match=r"KERAS_HYBRID_LOG_LEVEL='loud'"):
        log_level.apply({"KERAS_HYBRID_LOG_LEVEL": "loud"})

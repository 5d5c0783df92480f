"""Test utilities: a Keras-state-resetting TestCase, a way to run real
worker processes through the package's launcher, and a pool of them that
runs scenario after scenario."""

from keras_hybrid.testing.models import SPARSE_TABLES
from keras_hybrid.testing.multiprocess import WorkerRun
from keras_hybrid.testing.multiprocess import run_workers
from keras_hybrid.testing.pool import WorkerPool
from keras_hybrid.testing.pool import run_scenario
from keras_hybrid.testing.test_case import OneProcessTestCase
from keras_hybrid.testing.test_case import TestCase

__all__ = [
    "SPARSE_TABLES",
    "OneProcessTestCase",
    "TestCase",
    "WorkerPool",
    "WorkerRun",
    "run_scenario",
    "run_workers",
]

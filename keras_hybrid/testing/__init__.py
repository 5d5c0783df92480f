"""Test utilities: a Keras-state-resetting TestCase and a way to run real
worker processes through the package's launcher."""

from keras_hybrid.testing.models import SPARSE_TABLES
from keras_hybrid.testing.multiprocess import WorkerRun
from keras_hybrid.testing.multiprocess import run_workers
from keras_hybrid.testing.test_case import OneProcessTestCase
from keras_hybrid.testing.test_case import TestCase

__all__ = [
    "SPARSE_TABLES",
    "OneProcessTestCase",
    "TestCase",
    "WorkerRun",
    "run_workers",
]

"""Pool scenario: 300 training-step-like calls of two in-graph all-reduces
with a 300 s timeout; returns this process's thread count before and
after."""

import tensorflow as tf

import keras_hybrid as kh


def _threads() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise RuntimeError("no Threads line in /proc/self/status")


def count_threads() -> dict:
    with kh.HybridStrategy(timeout_seconds=300) as strategy:
        comm = strategy.communicator

        @tf.function
        def step(x):
            return comm.all_reduce([x, x * 2])

        step(tf.ones([4]))  # trace
        before = _threads()
        for _ in range(300):
            out = step(tf.ones([4]))
        return {"before": before, "after": _threads(), "sum": out[0].numpy()}

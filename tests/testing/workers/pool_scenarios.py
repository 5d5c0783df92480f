"""Scenarios for `test_pool.py`: what a pool worker must keep apart."""

import os
import sys
import time

import keras

import keras_hybrid as kh
from keras_hybrid.testing import models


def fit(tag: str) -> dict:
    """Trains a little on a strategy, prints `tag`, returns what it saw."""
    with kh.HybridStrategy(timeout_seconds=60) as strategy:
        x, y = models.make_data(64)
        with strategy.scope():
            model = models.build_model("sequential", seed=strategy.rank)
            models.compile_model(model, "sgd")
        model.fit(x, y, batch_size=32, epochs=1, verbose=0)
        print(f"{tag} on rank {strategy.rank}")
        print(f"{tag} to stderr", file=sys.stderr)
        return {
            "pid": os.getpid(),
            "rank": strategy.rank,
            "weights": model.get_weights(),
        }


def change_process_state(name: str) -> dict:
    """Changes what a scenario may change; the pool must undo it."""
    seen = {
        "env": os.environ.get(name),
        "policy": keras.config.dtype_policy().name,
        "cwd": os.getcwd(),
    }
    os.environ["KERAS_HYBRID_POOL_LEFTOVER"] = "1"
    keras.config.set_dtype_policy("mixed_float16")
    os.chdir("/")
    return seen


def look_at_process_state() -> dict:
    return {
        "leftover": os.environ.get("KERAS_HYBRID_POOL_LEFTOVER"),
        "policy": keras.config.dtype_policy().name,
        "cwd": os.getcwd(),
    }


def fail_on_rank(rank: int) -> int:
    if int(os.environ["KERAS_HYBRID_RANK"]) == rank:
        raise ValueError(f"this scenario fails on rank {rank}")
    return os.getpid()


def leave_open() -> int:
    strategy = kh.HybridStrategy(timeout_seconds=60)
    with strategy.scope():
        keras.layers.Dense(1)
    return os.getpid()


def hang() -> None:
    print(f"hanging in {os.getpid()}", flush=True)
    time.sleep(600)

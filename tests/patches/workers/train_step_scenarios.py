"""Scenario for the shared pool: trains every case of `train_steps` under
one `HybridStrategy` (float64; the table partitioned) and returns the
final weights."""

import os
import sys

import keras

import keras_hybrid as kh

sys.path.insert(0, os.path.dirname(__file__))
import train_steps  # noqa: E402


def train() -> dict:
    """Case -> this rank's final weights, `logs`: case -> its logs, and
    `kinds`: path -> kind."""
    floatx = keras.config.floatx()
    keras.config.set_floatx("float64")
    # The pool sets its baseline policy explicitly after each scenario,
    # and an explicit policy is not derived from floatx: set both, as a
    # fresh process's `set_floatx` alone does.
    keras.config.set_dtype_policy("float64")
    try:
        results = {"logs": {}, "kinds": {}}
        with kh.HybridStrategy(
            variable_kinds={".*table/embeddings": "sparse"}
        ) as strategy:
            for case in train_steps.CASES:
                with strategy.scope():
                    model = train_steps.build(case)
                results[case], results["logs"][case] = train_steps.train(
                    model, case
                )
                # The plan lists the variables alive now: read it while
                # this case's model is.
                results["kinds"].update(
                    (p.path, p.kind) for p in strategy.plan.variables
                )
        return results
    finally:
        keras.config.set_floatx(floatx)

"""A model compiled with `jit_compile=True` runs its steps without XLA on
several workers.

Keras compiles the whole distributed step with XLA when the user asks for
it (`model.compile(jit_compile=True)`; the default `"auto"` already
resolves to False under a `tf.distribute` strategy). Under a multi-worker
`HybridStrategy` that step holds the exchange's collectives, and their
sizes are known only at run time (the all-to-all's per-pair capacities).
XLA compiles neither: on CPU, TensorFlow fails the first step with
"Collectives are not yet implemented for CPU devices when compiling with
XLA". So a script written for one device, where `jit_compile=True` works,
failed on 2 workers. `turn_off` sets the model's public `jit_compile` to
False before `fit`, `evaluate` or `predict` makes its step functions (and
drops functions made with XLA), and warns once per model.
"""

from absl import logging

_FUNCTIONS = ("train_function", "test_function", "predict_function")


def turn_off(model, num_workers: int) -> None:
    """Turns `model`'s `jit_compile` off (with a warning) if it is on."""
    # `_jit_compile` is None until read: the "auto" default, which Keras
    # resolves to False under a strategy. Reading the property resolves it.
    if not model.jit_compile:
        return
    model.jit_compile = False
    for name in _FUNCTIONS:
        if getattr(model, name, None) is not None:
            setattr(model, name, None)
    logging.warning(
        "keras-hybrid: %s was compiled with jit_compile=True; its steps run "
        "without XLA on %d workers: XLA cannot compile the steps' "
        "collectives, whose sizes are known only at run time (on CPU, "
        "TensorFlow has no XLA collectives at all). Layers still run as "
        "compiled TensorFlow graphs (tf.function).",
        model.name,
        num_workers,
    )

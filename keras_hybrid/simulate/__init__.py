"""The cost simulator: predicted traffic and time per step at scale.

`profile_model` measures a model in one process; `predict` and `sweep`
turn the profile and a `ClusterSpec` into bytes and seconds per step for
the hybrid, PS-only, all-reduce and all-gather modes; a `Design` switches
the hybrid's exchange between its options (padding, the fused
exchange, the hierarchical exchange, hot rows and the all-to-all's
schedule), and a `PortBuffer` prices the timeouts of exchanges that
overrun a port's buffer. The command line is
`python -m keras_hybrid.simulate` (see docs/simulator.md).
"""

import importlib

# Where each public name lives. They are imported on first use: the cost
# library imports TensorFlow, and `python -m keras_hybrid.simulate --help`
# (which imports this package first) must not print its banners.
_SOURCES = {
    "ClusterSpec": "keras_hybrid.costs.cluster_spec",
    "Prediction": "keras_hybrid.costs.cost_model",
    "predict": "keras_hybrid.costs.cost_model",
    "sweep": "keras_hybrid.costs.cost_model",
    "Design": "keras_hybrid.costs.design",
    "PortBuffer": "keras_hybrid.costs.port_buffer",
    "Profile": "keras_hybrid.costs.profile",
    "VariableStats": "keras_hybrid.costs.profile",
    "profile_model": "keras_hybrid.simulate.profiler",
}

__all__ = sorted(_SOURCES)


def __getattr__(name: str):
    if name not in _SOURCES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_SOURCES[name]), name)

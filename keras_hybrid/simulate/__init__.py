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

from keras_hybrid.utils import lazy_exports

# Where each public name lives. They are imported on first use: the
# profiler imports TensorFlow, and the command line (which imports this
# package first) runs without it unless it profiles a workload.
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
__getattr__ = lazy_exports.lazy_getattr(__name__, _SOURCES)

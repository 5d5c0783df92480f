"""The cost simulator: predicted traffic and time per step at scale.

`profile_model` measures a model in one process; `predict` and `sweep`
turn the profile and a `ClusterSpec` into bytes and seconds per step for
the hybrid, PS-only, all-reduce and all-gather modes; a `Design` switches
the hybrid's exchange between its options (padding, the fused
exchange, the hierarchical exchange and hot rows). The command line is
`python -m keras_hybrid.simulate` (see docs/simulator.md).
"""

from keras_hybrid.costs.cluster_spec import ClusterSpec
from keras_hybrid.costs.cost_model import Prediction
from keras_hybrid.costs.cost_model import predict
from keras_hybrid.costs.cost_model import sweep
from keras_hybrid.costs.design import Design
from keras_hybrid.costs.profile import Profile
from keras_hybrid.costs.profile import VariableStats
from keras_hybrid.simulate.profiler import profile_model

__all__ = [
    "ClusterSpec",
    "Design",
    "Prediction",
    "Profile",
    "VariableStats",
    "predict",
    "profile_model",
    "sweep",
]

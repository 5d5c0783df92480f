"""Process launcher for multi-worker keras-hybrid jobs.

Importing this package does not import TensorFlow; only `--slurm` does.
"""

from keras_hybrid.launch.launcher import launch
from keras_hybrid.launch.launcher import plan_workers

__all__ = ["launch", "plan_workers"]

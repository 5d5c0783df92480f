"""Process launcher for multi-worker keras-hybrid jobs.

Importing this package does not import TensorFlow; only `--slurm` does.
"""

from keras_hybrid.launch.launcher import launch
from keras_hybrid.launch.launcher import plan_workers
from keras_hybrid.launch.main import run

__all__ = ["launch", "plan_workers", "run"]

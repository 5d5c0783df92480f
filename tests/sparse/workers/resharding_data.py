"""What `resharding_worker.py` trains on, importable without its flags
(a test module imports this at collection; importing the worker would
define its absl flags there and clash with other scripts' flags)."""

BATCH = 48
STEPS = 4
DATA_SEED = 11

"""Pool scenario: the collectives per train step of each census model
(`examples/collective_census/main.py`) on this worker."""

import os
import sys

ROOT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from examples.collective_census import main as census  # noqa: E402


def count_all(models: list, steps: int, batch_size: int) -> dict:
    return {name: census.count(name, steps, batch_size) for name in models}

"""The contract between the elastic launcher and its workers.

Environment variables name the launcher's directory, the initial members,
the bounds and the shared seed. The launcher and the workers then talk
through files in that directory (one host, or a directory every host
shares):

- `plan-<g>.json`: the launcher's plan of generation g (members, reason);
- `ready-<task>`: a joiner traced its step and waits to be admitted;
- `applied-<g>.json`: rank 0 switched to generation g (step, bytes moved).

Imports nothing heavy: the launcher runs without TensorFlow.
"""

import json
import os

DIR_ENV = "KERAS_HYBRID_ELASTIC_DIR"
MEMBERS_ENV = "KERAS_HYBRID_ELASTIC_MEMBERS"
MAX_NP_ENV = "KERAS_HYBRID_ELASTIC_MAX_NP"
MIN_NP_ENV = "KERAS_HYBRID_ELASTIC_MIN_NP"
SEED_ENV = "KERAS_HYBRID_ELASTIC_SEED"
# Group keys of generation g; the plain job's group key is 1.
GROUP_KEY_BASE = 1000
# Group keys of rank 0 and the joiners of generation g (state transfer).
STATE_GROUP_KEY_BASE = 1 << 20
REASONS = ("discovery", "lost_worker")


def write_plan(
    directory: str, generation: int, members, reason: str, joiners=()
) -> None:
    """Writes the plan of `generation` atomically (the launcher's side):
    its members, why, and which of them join (they receive the state)."""
    if reason not in REASONS:
        raise ValueError(
            f"`reason` must be one of {REASONS}. Received: reason={reason!r}"
        )
    write_file(
        os.path.join(directory, f"plan-{generation}.json"),
        json.dumps(
            {
                "generation": generation,
                "members": sorted(members),
                "reason": reason,
                "joiners": sorted(joiners),
            }
        ),
    )


def write_file(path: str, text: str) -> None:
    # Readers poll for the file: it must appear complete.
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)

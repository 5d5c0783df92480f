"""The contract between the elastic launcher and its workers.

Environment variables name the launcher's directory, the initial members,
the bounds and the shared seed. The launcher and the workers then exchange
these messages on a board (`plan_channel`): files in that directory (one
host, or `--elastic-dir`, a directory every host shares), or the
launcher's TCP server (other hosts without a shared directory):

- `plan-<g>.json`: the launcher's plan of generation g (members, reason);
- `ready-<task>`: a joiner traced its step and waits to be admitted;
- `applied-<g>.json`: rank 0 switched to generation g (step, bytes moved);
- `recover-<g>.json`: a member died; the survivors form generation g on
  the new cluster addresses it lists (`write_recovery`);
- `recovered-<g>.json`: rank 0 of the survivors resumed training after
  that recovery.

Imports nothing heavy: the launcher runs without TensorFlow.
"""

import json
import os

DIR_ENV = "KERAS_HYBRID_ELASTIC_DIR"
MEMBERS_ENV = "KERAS_HYBRID_ELASTIC_MEMBERS"
MAX_NP_ENV = "KERAS_HYBRID_ELASTIC_MAX_NP"
MIN_NP_ENV = "KERAS_HYBRID_ELASTIC_MIN_NP"
COMMIT_INTERVAL_ENV = "KERAS_HYBRID_ELASTIC_COMMIT_INTERVAL"
# The task that leads TensorFlow's collective groups (resolves them) in
# the cluster of the worker's `TF_CONFIG`: task 0 at the start, another
# survivor after a recovery that lost it (`write_recovery`).
LEADER_ENV = "KERAS_HYBRID_ELASTIC_LEADER"
# How long the launcher waits for discovery when fewer than --min-np
# workers are left (--elastic-timeout): survivors wait that long for its
# recovery plan too.
DISCOVERY_WAIT_ENV = "KERAS_HYBRID_ELASTIC_DISCOVERY_WAIT"
# The shared directory of commits of partitioned tables (the directory
# store); unset or empty, with no commit server either: a buddy copy
# (`elastic.file_store`, `elastic.buddy_store`).
COMMIT_DIR_ENV = "KERAS_HYBRID_ELASTIC_COMMIT_DIR"
# `host:port` of the launcher's commit server (the served store,
# `commit_server`), and its key (hex).
COMMIT_SERVER_ENV = "KERAS_HYBRID_ELASTIC_COMMIT_SERVER"
COMMIT_AUTHKEY_ENV = "KERAS_HYBRID_ELASTIC_COMMIT_AUTHKEY"
# How many next workers keep a buddy copy of each worker's rows (the buddy
# store, `elastic.buddy_store`): 1 by default, 2 to survive any two lost
# at once.
BUDDY_COPIES_ENV = "KERAS_HYBRID_ELASTIC_BUDDY_COPIES"
# Global steps between two commits when the launcher does not say.
DEFAULT_COMMIT_INTERVAL = 10
# Group keys of generation g; the plain job's group key is 1.
GROUP_KEY_BASE = 1000
# Group keys of rank 0 and the joiners of generation g (state transfer).
STATE_GROUP_KEY_BASE = 1 << 20
# Group keys of the 2-member groups of generation g's row moves: one per
# pair of tasks and generation, above the pairwise groups of a fixed job
# (`comm.tf_communicator`, from 1 << 24), below 2**31
# (`ElasticMembership.pair_group_key`).
PAIR_GROUP_KEY_BASE = 1 << 26
# Why a generation was formed. A "readdress" keeps the members but serves
# them on a new cluster that names a joiner's host (`write_plan`).
REASONS = ("discovery", "lost_worker", "readdress")


def write_plan(
    channel,
    generation: int,
    members,
    reason: str,
    joiners=(),
    cluster=None,
    leader: int = 0,
) -> None:
    """Puts the plan of `generation` on `channel` (a `plan_channel`
    board; the launcher's side):
    its members, why, which of them join (they receive the state), and
    for a `"readdress"` the new `cluster` addresses the members serve on
    and its collective `leader` (`elastic.recovery`, with nobody lost)."""
    if reason not in REASONS:
        raise ValueError(
            f"`reason` must be one of {REASONS}. Received: reason={reason!r}"
        )
    channel.put(
        f"plan-{generation}.json",
        json.dumps(
            {
                "generation": generation,
                "members": sorted(members),
                "reason": reason,
                "joiners": sorted(joiners),
                **(
                    {"cluster": list(cluster), "lost": [], "leader": leader}
                    if cluster is not None
                    else {}
                ),
            }
        ),
    )


def write_recovery(
    channel, generation: int, members, cluster, lost, leader: int
) -> None:
    """Puts the recovery plan of `generation` on `channel` (the launcher's
    side): the surviving `members`, the new `cluster` addresses (every
    task's `host:port`, since TensorFlow serves collectives again on new
    ports), the `lost` tasks, and the survivor that leads the collectives
    of the new cluster (`leader`: another one when the leader was lost)."""
    channel.put(
        recovery_name(generation),
        json.dumps(
            {
                "generation": generation,
                "members": sorted(members),
                "cluster": list(cluster),
                "lost": sorted(lost),
                "leader": int(leader),
                "reason": "lost_worker",
            }
        ),
    )


def recovery_name(generation: int) -> str:
    return f"recover-{generation}.json"


def recovered_name(generation: int) -> str:
    return f"recovered-{generation}.json"


def write_file(path: str, text: str) -> None:
    # Readers poll for the file: it must appear complete.
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)

"""`Exchange`: one collective of a step as one worker sees it, and the
units its bytes are counted in.

Sizes are those the package's collectives send (`sparse.lookup`,
`comm.Communicator.plan_exchange`), padded as `comm.capacity` pads
them (`ladder.capacities_of`).
"""

import dataclasses

ID_BYTES = 8  # `lookup.pull` sends ids as int64 local row indices
# A dynamic table's key goes to its owner with its lookup count: an
# int64 pair (`dynamic.key_exchange`).
KEY_BYTES = 16
COUNT_BYTES = 4  # int32 counts of `all_gather`
# `plan_exchange` sends each peer an int32 count, flag and largest count.
PLAN_BYTES_PER_PEER = 12


@dataclasses.dataclass(frozen=True)
class Exchange:
    """One collective of a step, as one worker sees it.

    Attributes:
        kind: String: `"all_reduce"`, `"all_gather"`, `"all_to_all"` or
            `"ps"` (pushes to and pulls from shards holding whole
            variables).
        bytes: Dict `{path: bytes}` this worker is charged (mean).
        wire: Float. What the algorithm moves per worker, padding
            included: the buffer of an all-reduce, the padded block of an
            all-gather, all padded blocks of an all-to-all, the dense
            bytes of `"ps"`.
        shard_bytes: Tuple of floats. For `"ps"`: bytes stored per shard.
        scope: String. `"flat"`: among all workers; for a hierarchical
            exchange (`Design.hierarchical`), `"intra"`: among the workers
            of each host, `"inter"`: among one worker per host (one such
            group per local rank, sharing the host's interface); for an
            all-reduce, `"hierarchical"`: reduce-scatter in the host, ring
            across hosts, all-gather in the host.
    """

    kind: str
    bytes: dict
    wire: float
    shard_bytes: tuple = ()
    scope: str = "flat"

"""The manifest of a sharded checkpoint, and where its files live.

```
<directory>/ckpt-000000120/          one checkpoint (step 120)
    manifest.json                    written last: no manifest, no checkpoint
    dense/<i>.npy                    replicated variables (the chief's copy)
    shard-00001-of-00004/<i>.npy     rows of table <i> that worker 1 owned,
                                     in its local order
    shard-00001-of-00004.json        sizes and CRCs of worker 1's files
<directory>/ckpt-000000180.tmp/      a save in progress (ignored)
```
"""

import dataclasses
import os
import re

FORMAT = "keras-hybrid-sharded-checkpoint/1"
MANIFEST = "manifest.json"
_NAME = re.compile(r"ckpt-(\d+)$")


def checkpoint_name(step: int) -> str:
    return f"ckpt-{step:09d}"


def shard_dir(rank: int, size: int) -> str:
    return f"shard-{rank:05d}-of-{size:05d}"


def dense_file(index: int) -> str:
    return f"dense/{index}.npy"


def table_file(index: int, shard: int, size: int) -> str:
    return f"{shard_dir(shard, size)}/{index}.npy"


@dataclasses.dataclass(frozen=True)
class VariableRecord:
    """One variable in the manifest.

    Attributes:
        path: String. Keras variable path.
        shape: List of ints. Full shape.
        dtype: String.
        partition: Dict (`RowPartition.get_config()`) if the variable was
            saved shard by shard, else None (one dense file).
        files: List of relative file paths, in shard order.
    """

    path: str
    shape: list
    dtype: str
    partition: dict | None
    files: list


def list_checkpoints(directory: str) -> list[str]:
    """Complete checkpoints under `directory` (with a manifest), oldest
    first."""
    if not os.path.isdir(directory):
        return []
    found = []
    for name in os.listdir(directory):
        match = _NAME.match(name)
        path = os.path.join(directory, name)
        if match and os.path.exists(os.path.join(path, MANIFEST)):
            found.append((int(match.group(1)), path))
    return [path for _, path in sorted(found)]


def latest_checkpoint(directory: str) -> str | None:
    """The newest complete checkpoint under `directory`, or None.

    `directory` may also be one checkpoint (a folder with a manifest).
    """
    if os.path.exists(os.path.join(directory, MANIFEST)):
        return directory
    found = list_checkpoints(directory)
    return found[-1] if found else None

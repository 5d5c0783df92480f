"""`shard_view`: where a whole read of a table means this shard's rows.

The optimizer's update (inside `extended.update`) and the owner's side of a
lookup read a `ShardedTable` whole; within this scope they get the rows
this worker stores instead of the stand-in other whole reads get.
"""

from keras_hybrid.utils.thread_flag import ThreadFlag

_flag = ThreadFlag()


def shard_view():
    """Within, whole reads of a table give this shard's rows."""
    return _flag.scope()


def in_shard_view() -> bool:
    """Whether this thread is inside `shard_view()`."""
    return bool(_flag)

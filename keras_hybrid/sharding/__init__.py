"""Which worker owns each row of a partitioned table.

`RowPartition` maps a row to its virtual shard and offset;
`ShardAssignment` maps virtual shards to workers. Both are plain data
that the runtime, the checkpoints and the cost library share.
"""

"""Dynamic embedding tables: keys from an unbounded space get rows of a
fixed-capacity table as training sees them (`DynamicTable`), with
admission, eviction, keyed initial rows and optimizer slots reset with
their row. The user-facing layer is `keras_hybrid.layers.DynamicEmbedding`.
"""

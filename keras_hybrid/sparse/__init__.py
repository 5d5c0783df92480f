"""Sparse variables: row-partitioned tables and their exchanges."""

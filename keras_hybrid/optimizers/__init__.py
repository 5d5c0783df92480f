"""Optimizer routing for partitioned tables."""

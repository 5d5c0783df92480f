"""Elastic jobs, launcher side: discovery, where tasks run, their
processes, and what happens when one is lost.

The worker side is `keras_hybrid.elastic`; the two talk through
`keras_hybrid.contract`. Imports no TensorFlow.
"""

"""Elastic training, worker side: the members of the moment, resizes,
commits of the training state, and recovery from a lost worker.

The launcher side is `keras_hybrid.launch.elastic`; the two talk through
`keras_hybrid.contract`.
"""

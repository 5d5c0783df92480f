"""Keras layers of keras-hybrid."""

from keras_hybrid.layers.dynamic_embedding import DynamicEmbedding
from keras_hybrid.layers.static_copy import to_static

__all__ = ["DynamicEmbedding", "to_static"]

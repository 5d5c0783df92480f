"""Keras layers of keras-hybrid."""

from keras_hybrid.layers.dynamic_embedding import DynamicEmbedding

__all__ = ["DynamicEmbedding"]

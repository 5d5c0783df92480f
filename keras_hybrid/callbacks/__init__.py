"""Keras callbacks for keras-hybrid training."""

from keras_hybrid.callbacks.communication_stats import CommunicationStats

__all__ = ["CommunicationStats"]

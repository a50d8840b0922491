"""The gates: one module per method."""

from .base import Gate, load_gate
from .skr import SKRClassifierGate, SKRKnnGate

__all__ = ["Gate", "load_gate", "SKRKnnGate", "SKRClassifierGate"]

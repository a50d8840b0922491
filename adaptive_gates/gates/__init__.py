"""The gates: one module per method."""

from .base import Gate, load_gate
from .bm25_difficulty import BM25DifficultyGate
from .skr import SKRClassifierGate, SKRKnnGate
from .thrust import ThrustGate

__all__ = ["Gate", "load_gate", "SKRKnnGate", "SKRClassifierGate", "ThrustGate", "BM25DifficultyGate"]

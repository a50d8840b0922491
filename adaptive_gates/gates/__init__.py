"""The gates: one module per method."""

from ..memory import ExactMemory, FaissMemory, SKRMemory
from .base import Gate, load_gate
from .bm25_difficulty import BM25DifficultyGate
from .budget import BudgetedGate
from .cascade import CascadeGate
from .draft_check import DraftCheckGate
from .logprob import LogprobGate
from .popularity import PopularityGate
from .seakr import SeaKRGate
from .skr import SKRClassifierGate, SKRKnnGate
from .skr_prompt import SKRIclGate, SKRPromptGate
from .stacked import StackedGate
from .thrust import ThrustGate
from .verbalized import VerbalizedGate

__all__ = [
    "BM25DifficultyGate",
    "BudgetedGate",
    "CascadeGate",
    "DraftCheckGate",
    "ExactMemory",
    "FaissMemory",
    "Gate",
    "LogprobGate",
    "PopularityGate",
    "SKRClassifierGate",
    "SKRIclGate",
    "SKRKnnGate",
    "SKRMemory",
    "SKRPromptGate",
    "SeaKRGate",
    "StackedGate",
    "ThrustGate",
    "VerbalizedGate",
    "load_gate",
]

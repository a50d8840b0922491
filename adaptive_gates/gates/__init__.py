"""The gates: one module per method (SeaKR's in ``adaptive_gates.seakr``); their contract
in ``base``, the learning they share in ``combiner``, learning in production in ``shadow``."""

from ..memory import ExactMemory, FaissMemory, SKRMemory
from ..moved import moved_attribute
from .base.gate import Gate, load_gate
from .bm25_difficulty import BM25DifficultyGate
from .budget import BudgetedGate
from .cascade import CascadeGate
from .draft_check.gate import DraftCheckGate
from .logprob import LogprobGate
from .popularity import PopularityGate
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
    "StackedGate",
    "ThrustGate",
    "VerbalizedGate",
    "load_gate",
]


def __getattr__(name: str) -> object:
    # Names this package handed on before they moved (one release of warnings).
    return moved_attribute(__name__, name)

"""The gates: one module per method."""

from .base import Gate, load_gate
from .bm25_difficulty import BM25DifficultyGate
from .budget import BudgetedGate
from .cascade import CascadeGate
from .logprob import LogprobGate
from .popularity import PopularityGate
from .skr import SKRClassifierGate, SKRKnnGate
from ..memory import ExactMemory, FaissMemory, SKRMemory
from .skr_prompt import SKRIclGate, SKRPromptGate
from .seakr import SeaKRGate
from .stacked import StackedGate
from .thrust import ThrustGate
from .verbalized import VerbalizedGate

__all__ = ["Gate", "load_gate", "SKRKnnGate", "SKRClassifierGate", "ThrustGate", "BM25DifficultyGate",
           "PopularityGate", "StackedGate", "SKRPromptGate", "SKRIclGate", "VerbalizedGate", "LogprobGate", "SeaKRGate", "SKRMemory",
           "FaissMemory", "ExactMemory", "BudgetedGate", "CascadeGate"]

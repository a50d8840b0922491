"""adaptive-gates: decide per question whether an LLM should retrieve.

Gates return a ``GateDecision``; fit them on your own data, calibrate their
thresholds to your budget, and evaluate them with ``adaptive_gates.evaluation``.
Heavy backends (torch, transformers, sentence-transformers) load lazily.
"""

from .calibration import Calibration, CalibrationWarning, threshold_for_objective, threshold_for_rate
from .data import CorpusRecord, OutcomeRecord, QARecord, load_corpus, load_outcomes, load_qa
from .decision import GateDecision, RetrievalMode
from .errors import (
    AdaptiveGatesError,
    BackendError,
    BackendMisconfiguredError,
    BackendUnavailableError,
    DataFormatError,
    GateLoadError,
    InvalidQuestionError,
    LogprobsUnavailableError,
    MalformedReplyError,
    NotFittedError,
)
from .feedback import Feedback, FeedbackLog, FeedbackNotSupportedError
from .gates import (
    BM25DifficultyGate,
    BudgetedGate,
    CascadeGate,
    ExactMemory,
    FaissMemory,
    Gate,
    LogprobGate,
    PopularityGate,
    SKRClassifierGate,
    SKRMemory,
    SKRIclGate,
    SKRKnnGate,
    SKRPromptGate,
    SeaKRGate,
    StackedGate,
    ThrustGate,
    VerbalizedGate,
    load_gate,
)
from .listeners import DecisionListener, LLMCallEvent, listening
from .metrics import contains_answer, exact_match, normalize_answer, token_f1
from .models.cached_embedder import CachedEmbedder
from .models.protocols import Embedder, ProbingLM
from .representers import CachedRepresenter, EmbedderRepresenter, LMHiddenStateRepresenter, Representer
from .seakr import (
    AnswerCandidate,
    RankedSnippet,
    ReasoningSelector,
    SelfAwareUncertainty,
    Selection,
    UncertaintyEstimate,
    UncertaintyReranker,
    eigen_score,
)
from .selfknowledge import SelfKnowledge, label_outcomes, outcome_scores

__version__ = "0.1.0"

__all__ = [
    "GateDecision",
    "RetrievalMode",
    "Gate",
    "SKRKnnGate",
    "SKRClassifierGate",
    "ThrustGate",
    "BM25DifficultyGate",
    "PopularityGate",
    "StackedGate",
    "BudgetedGate",
    "CascadeGate",
    "Feedback",
    "FeedbackLog",
    "FeedbackNotSupportedError",
    "VerbalizedGate",
    "LogprobGate",
    "SKRPromptGate",
    "SKRIclGate",
    "SeaKRGate",
    "SelfAwareUncertainty",
    "UncertaintyEstimate",
    "eigen_score",
    "UncertaintyReranker",
    "SeaKRPipeline",
    "run_pipeline",
    "RankedSnippet",
    "ReasoningSelector",
    "AnswerCandidate",
    "Selection",
    "Representer",
    "LMHiddenStateRepresenter",
    "EmbedderRepresenter",
    "CachedRepresenter",
    "Embedder",
    "ProbingLM",
    "CachedEmbedder",
    "SKRMemory",
    "FaissMemory",
    "ExactMemory",
    "load_gate",
    "DecisionListener",
    "LLMCallEvent",
    "listening",
    "Calibration",
    "threshold_for_rate",
    "threshold_for_objective",
    "OutcomeRecord",
    "QARecord",
    "CorpusRecord",
    "load_outcomes",
    "load_qa",
    "load_corpus",
    "SelfKnowledge",
    "label_outcomes",
    "outcome_scores",
    "normalize_answer",
    "exact_match",
    "token_f1",
    "contains_answer",
    "AdaptiveGatesError",
    "NotFittedError",
    "InvalidQuestionError",
    "DataFormatError",
    "GateLoadError",
    "BackendError",
    "BackendUnavailableError",
    "MalformedReplyError",
    "BackendMisconfiguredError",
    "LogprobsUnavailableError",
    "CalibrationWarning",
]


def __getattr__(name: str):
    # The SeaKR pipeline pulls in scikit-learn's stop words: imported on first use only.
    if name in ("SeaKRPipeline", "run_pipeline"):
        from . import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

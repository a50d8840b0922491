"""adaptive-gates: decide per question whether an LLM should retrieve.

Gates return a ``GateDecision``; fit them on your own data, calibrate their
thresholds to your budget, and evaluate them with ``adaptive_gates.evaluation``.
Heavy backends (torch, transformers, sentence-transformers) load lazily.
"""

from .calibration import Calibration, CalibrationWarning, threshold_for_objective, threshold_for_rate
from .data import CorpusRecord, OutcomeRecord, QARecord, load_corpus, load_outcome_files, load_outcomes, load_qa
from .decision import ROUTES, AnswerRoute, GateDecision, RetrievalMode
from .errors import (
    AdaptiveGatesError,
    BackendError,
    BackendMisconfiguredError,
    BackendUnavailableError,
    CollectionMismatchError,
    ContextLengthExceededError,
    DataFormatError,
    GateLoadError,
    InvalidQuestionError,
    LogprobsUnavailableError,
    MalformedReplyError,
    NotFittedError,
    StoreContentError,
)
from .feedback import Feedback, FeedbackLog, FeedbackNotSupportedError
from .gates import (
    BM25DifficultyGate,
    BudgetedGate,
    CascadeGate,
    DraftCheckGate,
    ExactMemory,
    FaissMemory,
    Gate,
    LogprobGate,
    PopularityGate,
    SeaKRGate,
    SKRClassifierGate,
    SKRIclGate,
    SKRKnnGate,
    SKRMemory,
    SKRPromptGate,
    StackedGate,
    ThrustGate,
    VerbalizedGate,
    load_gate,
)
from .listeners import DecisionListener, Listener, LLMCallEvent, listening
from .memory import MilvusMemory, VerdictMemory
from .metrics import contains_answer, exact_match, normalize_answer, token_f1
from .models.cached_embedder import CachedEmbedder
from .models.protocols import Embedder, ProbingLM
from .representers import CachedRepresenter, EmbedderRepresenter, LMHiddenStateRepresenter, Representer
from .retrieval import MilvusRetriever
from .seakr import (
    AnswerCandidate,
    RankedSnippet,
    ReasoningSelector,
    Selection,
    SelfAwareUncertainty,
    UncertaintyEstimate,
    UncertaintyReranker,
    eigen_score,
)
from .selfknowledge import SelfKnowledge, label_outcomes, outcome_scores
from .shipped import PRETRAINED, pretrained

__version__ = "0.1.0"

__all__ = [
    "PRETRAINED",
    "ROUTES",
    "AdaptiveGatesError",
    "AnswerCandidate",
    "AnswerRoute",
    "BM25DifficultyGate",
    "BackendError",
    "BackendMisconfiguredError",
    "BackendUnavailableError",
    "BudgetedGate",
    "CachedEmbedder",
    "CachedRepresenter",
    "Calibration",
    "CalibrationWarning",
    "CascadeGate",
    "CollectionMismatchError",
    "ContextLengthExceededError",
    "CorpusRecord",
    "DataFormatError",
    "DecisionListener",
    "DraftCheckGate",
    "Embedder",
    "EmbedderRepresenter",
    "ExactMemory",
    "FaissMemory",
    "Feedback",
    "FeedbackLog",
    "FeedbackNotSupportedError",
    "Gate",
    "GateDecision",
    "GateLoadError",
    "InvalidQuestionError",
    "LLMCallEvent",
    "LMHiddenStateRepresenter",
    "Listener",
    "LogprobGate",
    "LogprobsUnavailableError",
    "MalformedReplyError",
    "MilvusMemory",
    "MilvusRetriever",
    "NotFittedError",
    "OutcomeRecord",
    "PopularityGate",
    "ProbingLM",
    "QARecord",
    "RankedSnippet",
    "ReasoningSelector",
    "Representer",
    "RetrievalMode",
    "SKRClassifierGate",
    "SKRIclGate",
    "SKRKnnGate",
    "SKRMemory",
    "SKRPromptGate",
    "SeaKRGate",
    "SeaKRPipeline",
    "Selection",
    "SelfAwareUncertainty",
    "SelfKnowledge",
    "StackedGate",
    "StoreContentError",
    "ThrustGate",
    "UncertaintyEstimate",
    "UncertaintyReranker",
    "VerbalizedGate",
    "VerdictMemory",
    "contains_answer",
    "eigen_score",
    "exact_match",
    "label_outcomes",
    "listening",
    "load_corpus",
    "load_gate",
    "load_outcome_files",
    "load_outcomes",
    "load_qa",
    "normalize_answer",
    "outcome_scores",
    "pretrained",
    "run_pipeline",
    "threshold_for_objective",
    "threshold_for_rate",
    "token_f1",
]


def __getattr__(name: str):
    # The SeaKR pipeline pulls in scikit-learn's stop words: imported on first use only.
    if name == "SeaKRPipeline":
        from .seakr.pipeline import SeaKRPipeline

        return SeaKRPipeline
    if name == "run_pipeline":
        from .seakr.runner import run_pipeline

        return run_pipeline
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

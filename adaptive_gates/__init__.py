"""adaptive-gates: decide per question whether an LLM should retrieve.

Gates return a ``GateDecision``; fit them on your own data, calibrate their
thresholds to your budget, and evaluate them with ``adaptive_gates.evaluation``.
Heavy backends (torch, transformers, sentence-transformers) load lazily.
"""

from .bundled.shipped import PRETRAINED, pretrained
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
from .gates.base.calibration import Calibration, CalibrationWarning, threshold_for_objective, threshold_for_rate
from .gates.base.feedback import Feedback, FeedbackLog, FeedbackNotSupportedError
from .gates.base.listeners import DecisionListener, Listener, LLMCallEvent, listening
from .memory import VerdictMemory
from .milvus.memory import MilvusMemory
from .milvus.retrieval import MilvusRetriever
from .models.embedding.cached import CachedEmbedder
from .models.protocols import Embedder, ProbingLM
from .models.representers import CachedRepresenter, EmbedderRepresenter, LMHiddenStateRepresenter, Representer
from .moved import install as _install_moved_paths
from .records.answer_metrics import contains_answer, exact_match, normalize_answer, token_f1
from .records.data import CorpusRecord, OutcomeRecord, QARecord, load_corpus, load_outcome_files, load_outcomes, load_qa
from .records.decision import ROUTES, AnswerRoute, GateDecision, RetrievalMode
from .records.selfknowledge import SelfKnowledge, label_outcomes, outcome_scores
from .seakr import (
    AnswerCandidate,
    RankedSnippet,
    ReasoningSelector,
    SeaKRGate,
    Selection,
    SelfAwareUncertainty,
    UncertaintyEstimate,
    UncertaintyReranker,
    eigen_score,
)

__version__ = "0.1.0"

_install_moved_paths()

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

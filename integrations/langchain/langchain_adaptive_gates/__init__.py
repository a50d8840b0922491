"""LangChain integration of adaptive-gates: decide per question whether to retrieve.

- ``gated_router`` / ``GateRunnable``: a gate choosing between a direct and a RAG chain,
  or among named routes (``ScoreBands``); LangChain serialises the router with its gate
  by its saved directory (``SavedGateRunnable``; ``IMPORT_MAPPINGS`` for ``loads``).
- ``GatedRetriever``: a retriever that returns nothing when the model knows.
- ``GatePassagesRetriever`` / ``decision_documents``: the passages a draft-check gate
  retrieved to decide, answered over in the retrieve branch with no second retrieval.
- ``SeaKRCompressor``: SeaKR's uncertainty re-ranker as a document compressor.
- ``AnswerSelector``: SeaKR's reasoning selector over candidate answers.
- ``create_adaptive_rag_graph`` / ``AdaptiveRAGState`` / ``AdaptiveRAGInput``: a prebuilt
  adaptive-RAG LangGraph graph (gate, retrieval, optional document grading, answer); needs
  the ``langgraph`` extra. ``GateContext``: the gate control in a LangGraph run's context.
- ``SeaKRChain``: SeaKR's whole pipeline (step-wise retrieval, re-ranking, answer
  selection) as a runnable over any LangChain retriever.
- ``VectorStoreMemory``: the SKR memory in any LangChain ``VectorStore``.
- ``GateFeedback``: a callback handler that teaches the gate from judged answers;
  ``EvaluatorFeedback``: LangChain's string evaluators as the judges.
- ``create_gated_retriever_tool``: an agent's retrieval tool that asks the gate first
  and answers "not needed" (with the decision) when the model knows.
- Adapters: ``AdaptiveGatesChatModel`` / ``AdaptiveGatesEmbeddings`` (the core's models
  in LangChain) and ``LangChainChatModel`` / ``LangChainEmbedder`` / ``LangChainRetriever``
  (LangChain's models and retrievers behind the core's gates).
"""

from typing import TYPE_CHECKING, Any

from .answers import ANSWER_KEY, DECISION_KEY, ROUTE_KEY, draft_message, draft_text
from .branch_types import DisagreeingBranchesError
from .chat_models import AdaptiveGatesChatModel
from .compressors import ERROR_KEY, UNCERTAINTY_KEY, SeaKRCompressor
from .control import (
    CONTROL_KEYS,
    GATE_KEY,
    RETRIEVAL_KEY,
    TARGET_RATE_KEY,
    THRESHOLD_KEY,
    RequestControl,
    control_specs,
)
from .core_chat import LangChainChatModel
from .embeddings import AdaptiveGatesEmbeddings, LangChainEmbedder
from .evaluation import EvaluatorFeedback, JudgedAnswer, distance_verdict, is_distance_evaluator, score_verdict
from .feedback import GateFeedback
from .gate_runnable import DECISION_EVENT, GateRunnable
from .grading import GRADE_ERROR_KEY, GRADE_PROMPT, document_grader
from .graph import STATE_DECISION_KEY, gate_node, route_on_decision
from .graph_runtime import GateContext
from .history import condense_question_chain
from .llm_events import LLM_CALL_EVENT, llm_call_payload
from .passages import GatePassagesRetriever, LangChainRetriever, decision_documents, hit_documents
from .retrievers import DOCUMENT_DECISION_KEY, GatedDocuments, GatedRetriever
from .router import METADATA_KEY, ROUTE_METADATA_KEY, TAG_PREFIX, GatedRouter, gated_router
from .routes import RouteChoice, ScoreBands
from .saved_gate import SavedGateRunnable
from .seakr_chain import RetrieverSearch, SeaKRChain
from .selection import AnswerSelector
from .serialization import import_mappings
from .tools import ARTIFACT_DECISION_KEY, ARTIFACT_DOCUMENTS_KEY, GatedRetrieverInput, create_gated_retriever_tool
from .vectorstore_memory import LABEL_KEY, VectorStoreMemory

if TYPE_CHECKING:
    from .adaptive_rag import AdaptiveRAGInput, AdaptiveRAGState, create_adaptive_rag_graph

__version__ = "0.1.0"

#: The package's serialisable classes, for ``langchain_core.load.loads(...,
#: valid_namespaces=["langchain_adaptive_gates"], additional_import_mappings=IMPORT_MAPPINGS)``.
IMPORT_MAPPINGS = import_mappings(AdaptiveGatesChatModel, GatedRouter, SavedGateRunnable, ScoreBands)

#: Names that need langgraph (the ``langgraph`` extra), imported on first use.
_GRAPH_NAMES = ("AdaptiveRAGInput", "AdaptiveRAGState", "create_adaptive_rag_graph")


def __getattr__(name: str) -> Any:
    if name in _GRAPH_NAMES:
        from . import adaptive_rag

        return getattr(adaptive_rag, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ANSWER_KEY",
    "ARTIFACT_DECISION_KEY",
    "ARTIFACT_DOCUMENTS_KEY",
    "CONTROL_KEYS",
    "DECISION_EVENT",
    "DECISION_KEY",
    "DOCUMENT_DECISION_KEY",
    "ERROR_KEY",
    "GATE_KEY",
    "GRADE_ERROR_KEY",
    "GRADE_PROMPT",
    "IMPORT_MAPPINGS",
    "LABEL_KEY",
    "LLM_CALL_EVENT",
    "METADATA_KEY",
    "RETRIEVAL_KEY",
    "ROUTE_KEY",
    "ROUTE_METADATA_KEY",
    "STATE_DECISION_KEY",
    "TAG_PREFIX",
    "TARGET_RATE_KEY",
    "THRESHOLD_KEY",
    "UNCERTAINTY_KEY",
    "AdaptiveGatesChatModel",
    "AdaptiveGatesEmbeddings",
    "AdaptiveRAGInput",
    "AdaptiveRAGState",
    "AnswerSelector",
    "DisagreeingBranchesError",
    "EvaluatorFeedback",
    "GateContext",
    "GateFeedback",
    "GatePassagesRetriever",
    "GateRunnable",
    "GatedDocuments",
    "GatedRetriever",
    "GatedRetrieverInput",
    "GatedRouter",
    "JudgedAnswer",
    "LangChainChatModel",
    "LangChainEmbedder",
    "LangChainRetriever",
    "RequestControl",
    "RetrieverSearch",
    "RouteChoice",
    "SavedGateRunnable",
    "ScoreBands",
    "SeaKRChain",
    "SeaKRCompressor",
    "VectorStoreMemory",
    "condense_question_chain",
    "control_specs",
    "create_adaptive_rag_graph",
    "create_gated_retriever_tool",
    "decision_documents",
    "distance_verdict",
    "document_grader",
    "draft_message",
    "draft_text",
    "gate_node",
    "gated_router",
    "hit_documents",
    "is_distance_evaluator",
    "llm_call_payload",
    "route_on_decision",
    "score_verdict",
]

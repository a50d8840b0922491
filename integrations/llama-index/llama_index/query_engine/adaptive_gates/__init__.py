"""An adaptive query engine (a gate, a retriever and an LLM in one object) and its chat
engine variants (condense-question and condense-plus-context), which gate on the
conversation's standalone question; LlamaIndex's evaluators teaching the gate; and a
gated engine persisted beside its index's storage."""

from adaptive_gates.extend import ROUTES

from .base import DEFAULT_DIRECT_PROMPT, METADATA_KEY, ROUTE_KEY, AdaptiveQueryEngine
from .chat import AdaptiveChatEngine
from .context_chat import AdaptiveContextChatEngine
from .draft import DraftQueryEngine
from .evaluation import DecisionRecording, EvaluatorFeedback, JudgedQuery, JudgedResponse
from .persist import ENGINE_FILE, GATE_DIR, load_gated_engine, persist_gated_index
from .standalone import CONDENSE_ERROR_KEY, QUESTION_KEY
from .streaming import GatedStreamingChatResponse

__all__ = [
    "CONDENSE_ERROR_KEY",
    "DEFAULT_DIRECT_PROMPT",
    "ENGINE_FILE",
    "GATE_DIR",
    "METADATA_KEY",
    "QUESTION_KEY",
    "ROUTES",
    "ROUTE_KEY",
    "AdaptiveChatEngine",
    "AdaptiveContextChatEngine",
    "AdaptiveQueryEngine",
    "DecisionRecording",
    "DraftQueryEngine",
    "EvaluatorFeedback",
    "GatedStreamingChatResponse",
    "JudgedQuery",
    "JudgedResponse",
    "load_gated_engine",
    "persist_gated_index",
]

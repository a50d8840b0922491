"""What a framework package builds on, beside the package root and ``adaptive_gates.models``.

An adapter of LangChain, LlamaIndex or another framework asks a gate for its decisions
by one policy (``decide_or_fallback``), reads and writes token log-probabilities in
OpenAI's shape (``tokens_from_openai``, ``tokens_to_openai``), reads decisions and routes,
drives a gate's rounds of LLM requests on the framework's own models, hears decisions
and LLM calls, teaches a gate through feedback and through the pairs of the decisions
it answers (``ShadowLearner``), and keeps an SKR memory in the framework's vector
store. The pieces it needs for that, and are not part of a user's
everyday API, are named here; the framework packages import from the core only the
root, ``adaptive_gates.models`` and this module (a test holds them to it), so what is
named here is kept as stable as the root's API.
"""

from __future__ import annotations

from .answering.agent_tool import not_needed_reply
from .answering.history_window import refers_back, standalone_question
from .answering.prompts import QA, quote_question, quote_turns
from .gates.base.door_policy import (
    RAISED_BY_DOORS,
    adecide_batch_or_fallback,
    adecide_or_fallback,
    decide_batch_or_fallback,
    decide_or_fallback,
)
from .gates.base.driving import adrive, drive
from .gates.base.feedback import Feedback
from .gates.base.given_vectors import VECTOR_QUESTION, DecidesFromVectors
from .gates.base.listeners import DecisionListener, LLMCallEvent, listening, notify_decisions
from .gates.shadow.learner import DEFAULT_REFIT_EVERY, ShadowLearner, door_learner
from .memory.memories import l2_normalise
from .memory.store_backed import LABEL_KEY, Similarity, StoreBackedMemory
from .models.lm.generation import first_stop
from .persistence.atomic_file import write_text_whole
from .persistence.saved_format import read_json_file
from .records.decision import DIRECT, DRAFT, RETRIEVE, ROUTES, AnswerRoute, RetrievalMode, check_retrieval_mode
from .records.selfknowledge import KNOWN, UNKNOWN
from .records.token_logprobs import tokens_from_openai, tokens_to_openai
from .retrieval.base import Hit
from .seakr.queries import is_content_word

__all__ = [
    "DEFAULT_REFIT_EVERY",
    "DIRECT",
    "DRAFT",
    "KNOWN",
    "LABEL_KEY",
    "QA",
    "RAISED_BY_DOORS",
    "RETRIEVE",
    "ROUTES",
    "UNKNOWN",
    "VECTOR_QUESTION",
    "AnswerRoute",
    "DecidesFromVectors",
    "DecisionListener",
    "Feedback",
    "Hit",
    "LLMCallEvent",
    "RetrievalMode",
    "ShadowLearner",
    "Similarity",
    "StoreBackedMemory",
    "adecide_batch_or_fallback",
    "adecide_or_fallback",
    "adrive",
    "check_retrieval_mode",
    "decide_batch_or_fallback",
    "decide_or_fallback",
    "door_learner",
    "drive",
    "first_stop",
    "is_content_word",
    "l2_normalise",
    "listening",
    "not_needed_reply",
    "notify_decisions",
    "quote_question",
    "quote_turns",
    "read_json_file",
    "refers_back",
    "standalone_question",
    "tokens_from_openai",
    "tokens_to_openai",
    "write_text_whole",
]

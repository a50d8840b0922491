"""Answering questions: the answerer, its prompts, the chat history window, outcome
collection and the agent tool's reply."""

from .answerer import (
    ANSWER_STOP,
    DEFAULT_INSTRUCTION,
    DEFAULT_MAX_NEW_TOKENS,
    Answer,
    Answerer,
    LLMAnswerer,
    ReplyAnswerer,
    build_prompt,
    clean_answer,
    prompt_template,
)

__all__ = [
    "ANSWER_STOP",
    "DEFAULT_INSTRUCTION",
    "DEFAULT_MAX_NEW_TOKENS",
    "Answer",
    "Answerer",
    "LLMAnswerer",
    "ReplyAnswerer",
    "build_prompt",
    "clean_answer",
    "prompt_template",
]

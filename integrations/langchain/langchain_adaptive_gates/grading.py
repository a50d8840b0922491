"""Judging each retrieved document's relevance to the question before answering, as
LangGraph's adaptive-RAG tutorial grades them: an LLM asked yes or no, or any function."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

from langchain_core.documents import Document
from langchain_core.language_models import BaseLanguageModel
from langchain_core.messages import BaseMessage
from langchain_core.prompts import BasePromptTemplate, ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda

logger = logging.getLogger(__name__)

#: Metadata key of a document whose grading failed: why (it is kept, since nothing said
#: it was irrelevant).
GRADE_ERROR_KEY = "grade_error"

#: The grader's prompt; its variables are ``document`` (the text) and ``question``.
GRADE_PROMPT = ChatPromptTemplate.from_messages(
    [
        ("system", "You judge whether a document helps answer a question. Reply with yes or no."),
        ("human", "Document: {document}\n\nQuestion: {question}\n\nDoes the document help answer it? yes or no:"),
    ]
)

#: What grades documents: an LLM (asked with ``GRADE_PROMPT``), a runnable taking
#: ``{"question", "document"}`` and answering a bool or yes/no text, or a function
#: ``(question, document) -> bool``.
Grader: TypeAlias = BaseLanguageModel | Runnable[Any, Any] | Callable[[str, Document], Any]


def document_grader(llm: BaseLanguageModel | Runnable, prompt: BasePromptTemplate = GRADE_PROMPT) -> Runnable:
    """A runnable from ``{"question", "document"}`` to whether ``llm`` judged the
    document relevant (its reply must start with yes or no)."""
    missing = {"question", "document"} - set(prompt.input_variables)
    if missing:
        raise ValueError(f"the grading prompt must use the variables {sorted(missing)}")
    return (prompt | llm | RunnableLambda(parse_grade, name="parse_grade")).with_config(run_name="grade_document")


def parse_grade(output: Any) -> bool:
    """A grader's verdict: a bool as it is, a reply (text or message) by its first
    word, yes or no; any other reply raises ``ValueError``."""
    if isinstance(output, bool):
        return output
    text = output.text if isinstance(output, BaseMessage) else output
    if not isinstance(text, str):
        raise TypeError(f"a grader must answer a bool or yes/no text, got {type(output).__name__}")
    words = re.findall(r"[a-z]+", text.lower())
    if words and words[0] in ("yes", "no"):
        return words[0] == "yes"
    raise ValueError(f"the grader answered neither yes nor no: {text!r}")


def as_grader(grader: Grader) -> Runnable[tuple[str, Document], bool]:
    """``grader`` as one runnable from ``(question, document)`` to its verdict."""
    judge: Runnable | Callable[[str, Document], Any] = (
        document_grader(grader) if isinstance(grader, BaseLanguageModel) else grader
    )
    if isinstance(judge, Runnable):
        return RunnableLambda(_grade_inputs, name="grade_inputs") | judge | RunnableLambda(parse_grade)
    if callable(judge):
        function = judge

        def grade(pair: tuple[str, Document]) -> bool:
            return parse_grade(function(*pair))

        return RunnableLambda(grade, name=getattr(function, "__name__", "grade_document"))
    raise TypeError(f"grade_documents must be an LLM, a runnable or a function, got {type(grader).__name__}")


def relevant(
    grader: Runnable[tuple[str, Document], bool], question: str, documents: Sequence[Document], config: RunnableConfig
) -> list[Document]:
    """The documents ``grader`` judged relevant, in order; a document whose grading
    failed is kept with the reason under ``GRADE_ERROR_KEY``."""
    verdicts = grader.batch([(question, d) for d in documents], config, return_exceptions=True)
    return _kept(documents, verdicts)


async def arelevant(
    grader: Runnable[tuple[str, Document], bool], question: str, documents: Sequence[Document], config: RunnableConfig
) -> list[Document]:
    """``relevant`` on the async path."""
    verdicts = await grader.abatch([(question, d) for d in documents], config, return_exceptions=True)
    return _kept(documents, verdicts)


def _grade_inputs(pair: tuple[str, Document]) -> dict[str, str]:
    question, document = pair
    return {"question": question, "document": document.page_content}


def _kept(documents: Sequence[Document], verdicts: Sequence[bool | Exception]) -> list[Document]:
    kept = []
    for document, verdict in zip(documents, verdicts):
        if isinstance(verdict, Exception):
            reason = f"{type(verdict).__name__}: {verdict}"
            logger.warning("grading a document failed (%s); it is kept", reason)
            kept.append(document.model_copy(update={"metadata": {**document.metadata, GRADE_ERROR_KEY: reason}}))
        elif verdict:
            kept.append(document)
    return kept

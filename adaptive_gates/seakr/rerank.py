"""SeaKR's self-aware re-ranking (SPEC §4.3): order snippets by how sure the LLM is
after reading each one.

For every candidate snippet, put it alone in the context before the question (and the
reasoning so far), and measure the LLM's self-aware uncertainty U there; the snippet
after which U is lowest is the one the model can answer from most consistently. An
undefined U (every sample empty) ranks last, as SeaKR's +∞ for an empty output. The
re-ranker works on any retriever's output, so it drops into any RAG pipeline.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..answering.answerer import ANSWER_STOP, DEFAULT_INSTRUCTION
from ..answering.prompts import check_template, fill
from ..records.validation import check_stops
from .reasoning_prompt import snippet_template
from .snippets import snippet_text
from .uncertainty import SelfAwareUncertainty, UncertaintyEstimate

logger = logging.getLogger(__name__)

#: SeaKR's code form with one snippet in the context (``Context: [1] doc``), the
#: project's short-answer instruction, then the question and the answer so far.
DEFAULT_RERANK_TEMPLATE = snippet_template(demos=(), instruction=DEFAULT_INSTRUCTION + "\n")


@dataclass(frozen=True)
class RankedSnippet:
    """One candidate with the LLM's uncertainty after reading it.

    Attributes:
        index: its position in the candidates given.
        text: the snippet text put in the context.
        uncertainty: U after reading it; ``math.inf`` when U is undefined or could
            not be measured.
        estimate: the full estimate (sample count, samples, ablation signals);
            ``None`` when measuring failed.
        item: the candidate as given (a string or the caller's object), so an adapter
            maps results back without a table of its own.
        error: why U could not be measured (the estimator raised), else ``None``.
    """

    index: int
    text: str
    uncertainty: float
    estimate: UncertaintyEstimate | None
    item: Any
    error: str | None = None


class UncertaintyReranker:
    """Order candidate snippets by the LLM's self-aware uncertainty after each one.

    Args:
        uncertainty: the U estimator; ``None`` = SeaKR's settings on the embedded LM.
        prompt_template: the context with slots ``{snippet}``, ``{question}`` and
            ``{reasoning}`` (the answer so far, led by a space; empty for simple QA).
        stop: stop strings of the samples (those of the answer call that follows).
        formatted: ``True`` when the template is the full model input (completion
            models, few-shot prompts); ``False`` sends it as a chat user message.
    """

    def __init__(
        self,
        uncertainty: SelfAwareUncertainty | None = None,
        *,
        prompt_template: str = DEFAULT_RERANK_TEMPLATE,
        stop: Sequence[str] | None = ANSWER_STOP,
        formatted: bool = False,
    ) -> None:
        if uncertainty is not None and not isinstance(uncertainty, SelfAwareUncertainty):
            raise ValueError(f"uncertainty must be a SelfAwareUncertainty or None, got {type(uncertainty).__name__}")
        self.uncertainty = uncertainty or SelfAwareUncertainty()
        self.prompt_template = check_template(prompt_template, "snippet")
        self.stop = check_stops(stop)
        self.formatted = formatted

    def rerank(self, question: str, snippets: Sequence[Any], *, reasoning: str = "") -> list[RankedSnippet]:
        """``snippets`` from lowest to highest U; ties keep the given order. A snippet
        whose U cannot be measured (the estimator raised: a backend failure) ranks last
        with the reason in its ``error``: one snippet's failure costs it its rank, not
        the question its answer.

        A snippet is a string or any object with a text accessor (see
        :func:`~adaptive_gates.seakr.snippets.snippet_text`): a LangChain ``Document``,
        a LlamaIndex node, anything with ``text``.

        Raises:
            TypeError: a snippet has no text accessor.
            ValueError: an empty question or snippet.
        """
        if not isinstance(question, str) or not question.strip():
            raise ValueError("question must be a non-empty string")
        if not isinstance(reasoning, str):
            raise ValueError(f"reasoning must be a str, got {type(reasoning).__name__}")
        if isinstance(snippets, str):
            raise ValueError("snippets must be a sequence of snippets, got a single string")
        texts = [_snippet_text(item, i) for i, item in enumerate(snippets)]
        answer_so_far = f" {reasoning.strip()}" if reasoning.strip() else ""
        ranked = []
        for i, (item, text) in enumerate(zip(snippets, texts)):
            prompt = fill(self.prompt_template, snippet=text, question=question.strip(), reasoning=answer_so_far)
            try:
                estimate = self.uncertainty.estimate(prompt, stop=self.stop, formatted=self.formatted)
            except Exception as exc:  # one snippet's failure, not the ranking's
                logger.warning("U after snippet %d could not be measured; it ranks last", i, exc_info=True)
                ranked.append(RankedSnippet(i, text, math.inf, None, item, f"{type(exc).__name__}: {exc}"))
                continue
            u = estimate.value if estimate.defined else math.inf
            ranked.append(RankedSnippet(i, text, u, estimate, item))
        return sorted(ranked, key=lambda r: r.uncertainty)  # stable: ties keep the given order


def _snippet_text(item: Any, index: int) -> str:
    try:
        text = snippet_text(item)
    except TypeError as exc:
        raise TypeError(f"snippet {index}: {exc}") from None
    if not text.strip():
        raise ValueError(f"snippet {index} is empty")
    return " ".join(text.split())

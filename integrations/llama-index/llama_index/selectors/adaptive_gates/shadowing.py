"""Shadow learning for the components of ours that answer over the passages a
draft-check decision checked (the adaptive query engine, the context chat engine, the
adaptive-RAG workflow): each hands its answered decision to the core's
``ShadowLearner`` the same way (``adaptive_gates.extend``, ``docs/shadow_learning.md``).

A decision answered over its passages gives its pair with the component's answer; one
answered without them is, when the learner draws it, answered over them too by
``answer_over`` (the component's own LLM and prompt), after the decision's passages went
through the component's node postprocessors. It all runs in the learner's worker thread
after the user has the answer; a failure is logged, never raised.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from llama_index.core.base.response.schema import RESPONSE_TYPE, AsyncStreamingResponse, StreamingResponse
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle

from adaptive_gates import GateDecision
from adaptive_gates.extend import ShadowLearner

from .passages import decision_nodes, hit_nodes

logger = logging.getLogger(__name__)

#: The component's answer over the nodes given (called in the learner's worker thread).
AnswerOver = Callable[[list[NodeWithScore]], str]


def learn_from_answer(
    learner: ShadowLearner | None,
    decision: GateDecision | Mapping[str, Any],
    nodes: Sequence[NodeWithScore],
    text: str | None,
    answer_over: AnswerOver,
    query_bundle: QueryBundle,
    postprocessors: Sequence[BaseNodePostprocessor] = (),
) -> None:
    """Hand a component's answered ``decision`` to ``learner`` (nothing when ``None``).

    Args:
        learner: the component's shadow learner.
        decision: the decision (or its dict, as workflow events carry it).
        nodes: the nodes the user's answer was made over; the decision counts as
            answered over its passages when it retrieved with them and these are some.
        text: the user's answer, ``None`` when it is not there to read (a stream):
            then a retrieved decision's pair is not recorded.
        answer_over: the component's answer over nodes, for a shadow.
        query_bundle: what the postprocessors read.
        postprocessors: the component's node postprocessors, applied to the decision's
            passages before a shadow answer.

    Returns at once; never raises.
    """
    if learner is None:
        return
    try:
        if not isinstance(decision, GateDecision):
            decision = GateDecision.from_dict(decision)
        retrieved = decision_nodes(decision) is not None and bool(nodes)
        ask = functools.partial(_shadow_answer, decision, answer_over, query_bundle, tuple(postprocessors))
    except Exception:  # nothing here may reach the user's answer
        logger.exception("shadow learning: an answered decision could not be read")
        return
    learner.after_answer(decision, retrieved, text, ask)


def _shadow_answer(
    decision: GateDecision,
    answer_over: AnswerOver,
    query_bundle: QueryBundle,
    postprocessors: Sequence[BaseNodePostprocessor],
) -> str:
    """The component's answer over the passages ``decision`` checked, post-processed."""
    assert decision.passages is not None  # the learner asks only for a decision with passages
    nodes = hit_nodes(decision.passages)
    for postprocessor in postprocessors:
        nodes = postprocessor.postprocess_nodes(nodes, query_bundle=query_bundle)
    return answer_over(nodes)


def synthesized_text(response: RESPONSE_TYPE) -> str:
    """The text of a sync synthesizer's response (a stream read to its end)."""
    if isinstance(response, StreamingResponse):
        response = response.get_response()
    if isinstance(response, AsyncStreamingResponse):  # not from a sync synthesize
        raise TypeError("the response synthesizer gave an async stream to a sync call")
    return str(response.response or "")


__all__ = ["AnswerOver", "learn_from_answer", "synthesized_text"]

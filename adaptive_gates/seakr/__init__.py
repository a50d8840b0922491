"""SeaKR (Yao et al., 2024; SPEC §4): self-aware uncertainty and what is built on it.

- ``uncertainty``: the estimator of U from the hidden states of sampled answers;
- ``rerank``: snippets ordered by U after reading each (§4.3), their text read by
  ``snippets.snippet_text`` (strings, LangChain documents, LlamaIndex nodes);
- ``reasoning``: the final answer picked by lower U (§4.4);
- ``pipeline``: retrieval, re-ranking and reasoning end to end, with its few-shot
  ``prompts``, FLARE-style search ``queries`` and the ``trace`` of a run;
- ``runner``: a pipeline over a QA set, scored and checkpointed.

The gate itself is ``adaptive_gates.gates.seakr.SeaKRGate``. The pipeline and its
runner import scikit-learn's stop words, so they load on first use.
"""

from .reasoning import AnswerCandidate, ReasoningSelector, Selection
from .rerank import RankedSnippet, UncertaintyReranker
from .snippets import snippet_text
from .uncertainty import SelfAwareUncertainty, UncertaintyEstimate, eigen_score

__all__ = [
    "SelfAwareUncertainty",
    "UncertaintyEstimate",
    "eigen_score",
    "UncertaintyReranker",
    "RankedSnippet",
    "snippet_text",
    "ReasoningSelector",
    "AnswerCandidate",
    "Selection",
    "SeaKRPipeline",
    "run_pipeline",
]


def __getattr__(name: str):
    if name == "SeaKRPipeline":
        from .pipeline import SeaKRPipeline

        return SeaKRPipeline
    if name == "run_pipeline":
        from .runner import run_pipeline

        return run_pipeline
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

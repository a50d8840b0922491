"""SeaKR (Yao et al., 2024; SPEC §4): self-aware uncertainty and all that is built on it.

- ``uncertainty``: the estimator of U from the hidden states of sampled answers;
- ``gate``: ``SeaKRGate``, which retrieves when U is high (§4.2);
- ``rerank``: snippets ordered by U after reading each (§4.3), their text read by
  ``snippets.snippet_text`` (strings, LangChain documents, LlamaIndex nodes);
- ``reasoning``: the final answer picked by lower U (§4.4);
- ``reasoning_prompt``, FLARE-style search ``queries``, the pseudo-``step`` test and the
  ``trace`` of a run: the parts of the multi-hop pipeline;
- ``pipeline``, the multi-hop pipeline (SPEC §4) that runs the gate on every reasoning
  step, ``routes`` its final answer's routes, and ``runner`` the pipeline over a QA set,
  scored and checkpointed. These three pull in scikit-learn's stop words and are
  imported on first use (``adaptive_gates.SeaKRPipeline``, ``adaptive_gates.run_pipeline``).
"""

from .gate import SeaKRGate
from .reasoning import AnswerCandidate, ReasoningSelector, Selection
from .rerank import RankedSnippet, UncertaintyReranker
from .snippets import snippet_text
from .uncertainty import SelfAwareUncertainty, UncertaintyEstimate, eigen_score

__all__ = [
    "AnswerCandidate",
    "RankedSnippet",
    "ReasoningSelector",
    "SeaKRGate",
    "Selection",
    "SelfAwareUncertainty",
    "UncertaintyEstimate",
    "UncertaintyReranker",
    "eigen_score",
    "snippet_text",
]

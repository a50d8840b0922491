"""SeaKR end to end (SPEC §4.2–4.4): self-aware retrieval, re-ranking and reasoning.

Multi-hop mode, per question:

1. **Gate** (§4.2, ``seakr.step.pseudo_step``). Pseudo-generate the next reasoning step
   greedily from the question and the steps so far (no documents) and estimate the
   uncertainty U of that context; retrieve iff U > δ, U is undefined, or the step is empty.
2. **Query** (§4.2). FLARE-style (``seakr.queries``): the confident and already-known
   content words of the pseudo-step, else the question. A query searched before ends
   the loop.
3. **Re-rank** (§4.3). BM25's top ``n_candidates`` not yet read, ordered by U after
   reading each (``UncertaintyReranker``); the step is generated with the lowest-U one.
4. **Reason** (§4.4). Loop until a step says "So the answer is …", or ``max_steps`` steps,
   or ``max_docs`` snippets read; then ``ReasoningSelector`` picks, by lower U, between
   the rationale route and the knowledge route (all snippets read, full chain of thought).

δ has no default: U's scale moves with the model, the layer read, k and α (the paper's
−6 is for LLaMA-2-7B; SmolLM2-135M's U was 4.0–5.4 on five NQ questions in
``benchmarks/results/seakr_cost.json``). Pass ``threshold=`` or
``calibrate`` the pipeline on your own questions, as ``SeaKRGate`` is calibrated: by
a target retrieval rate or an objective, on U of each question's first step (the
context the gate first decides on). The multi-hop mode refuses to run without δ.

Simple-QA mode: one retrieval with the question, re-rank the candidates by U, answer
from the best one. Two baselines share the prompt: ``no-retrieval`` and
``single-retrieval`` (the question's top snippets in context).

The prompt is SeaKR's code form (``seakr.reasoning_prompt``) given to the model as a raw
completion text: on 16 HotpotQA dev questions SmolLM2-135M-Instruct ended its chain of
thought with "So the answer is …" 10 times with the raw text, 4 times when the same text
was sent as a chat message.

The final answer's routes are ``pipeline.seakr_routes``'s; ``pipeline.runner.run_pipeline``
runs a pipeline over a QA set and scores it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import NotFittedError
from ..gates.base.calibration import Calibration
from ..models.protocols import check_probing_lm
from ..records.answer_metrics import extract_seakr_answer
from ..records.validation import MAX_NEW_TOKENS, check_count, check_question
from ..retrieval.base import Hit, Retriever
from .gate import SeaKRGate
from .queries import build_query
from .reasoning_prompt import (
    ANSWER_STOPS,
    DEFAULT_DEMOS,
    STEP_STOPS,
    Demo,
    build_prompt,
    clip_passage,
    normalize_step,
    prompt_template,
    snippet_template,
)
from .routes import FinalAnswer
from .step import pseudo_step
from .trace import Candidate, SeaKRResult, Step

if TYPE_CHECKING:
    from ..models.lm.generation import Generation
    from ..models.protocols import ProbingLM
    from .reasoning import ReasoningSelector
    from .rerank import UncertaintyReranker
    from .uncertainty import SelfAwareUncertainty

__all__ = ["MODES", "RATIONALE_FORMS", "SeaKRPipeline"]

logger = logging.getLogger(__name__)

#: ``multihop`` and ``simple`` are SeaKR; ``no-retrieval`` (chain of thought alone) and
#: ``single-retrieval`` (the question's top ``n_candidates`` snippets in context) are the
#: usual baselines, with the same prompt.
MODES = ("multihop", "simple", "no-retrieval", "single-retrieval")
#: How the rationale route answers. ``reread`` (the authors' code, default): answer again
#: with the steps as the context; its U is that context's. ``append`` (the paper): append
#: "So the final answer is" to the steps; its U is the mean U of the steps.
RATIONALE_FORMS = ("reread", "append")


class SeaKRPipeline:
    """Answer questions with SeaKR over a retriever and a local causal LM.

    Args:
        retriever: anything with ``search(query, k) -> list[Hit]`` (BM25 in the paper).
        lm: a ``ProbingLM`` (e.g. ``LocalCausalLM``); ``None``: the estimator's model
            when one is given, else the embedded SmolLM2. Its greedy generations and token log-probabilities
            drive the steps and the queries.
        uncertainty: the ``SelfAwareUncertainty`` estimator of U; ``None``: SeaKR's
            settings on ``lm``.
        threshold: δ; retrieve when U > δ. ``None``: none yet; ``calibrate`` sets it, and the
            multi-hop mode refuses to run without it (the other modes do not use it).
        mode: one of ``MODES``.
        rerank: order candidates by U (§4.3); ``False`` reads BM25's first.
        select: choose the final answer between the two routes (§4.4); ``False`` keeps the
            answer the steps reached (forced with "So the answer is" when they did not).
        rationale: how the rationale route answers, one of ``RATIONALE_FORMS``.
        n_candidates: snippets per search (N = 3).
        max_steps, max_docs: loop limits (7 and 5).
        theta: FLARE's masking threshold for query words (0.1).
        step_tokens: greedy budget of one reasoning step.
        answer_tokens: greedy budget of a full chain of thought.
        demos: the few-shot demonstrations.
        max_doc_chars: each snippet is cut to this many characters in prompts.
        prefix_cache: while answering a question the LM keeps the KV caches of this many
            recent prompts (``LocalCausalLM.prefix_cache``), so the demo block and the
            prompts sent twice (a step, then its U) are not computed again; 0 = off.
            The answers and traces are the same either way
            (``benchmarks/seakr_prefix_cache.py``); 4 covers one step's gate prompt and
            its three re-ranking prompts.
    """

    def __init__(
        self,
        retriever: Retriever,
        lm: ProbingLM | None = None,
        *,
        uncertainty: SelfAwareUncertainty | None = None,
        threshold: float | None = None,
        mode: str = "multihop",
        rerank: bool = True,
        select: bool = True,
        rationale: str = "reread",
        n_candidates: int = 3,
        max_steps: int = 7,
        max_docs: int = 5,
        theta: float = 0.1,
        step_tokens: int = 48,
        answer_tokens: int = 100,
        demos: Sequence[Demo] = DEFAULT_DEMOS,
        max_doc_chars: int = 600,
        prefix_cache: int = 4,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if rationale not in RATIONALE_FORMS:
            raise ValueError(f"rationale must be one of {RATIONALE_FORMS}, got {rationale!r}")
        if threshold is not None and (
            isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or math.isnan(threshold)
        ):
            raise ValueError(f"threshold must be a number or None, got {threshold!r}")
        for name, value in (
            ("n_candidates", n_candidates),
            ("max_steps", max_steps),
            ("max_docs", max_docs),
            ("step_tokens", step_tokens),
            ("answer_tokens", answer_tokens),
            ("max_doc_chars", max_doc_chars),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        for name, value in (("step_tokens", step_tokens), ("answer_tokens", answer_tokens)):
            check_count(value, name, MAX_NEW_TOKENS)
        if isinstance(prefix_cache, bool) or not isinstance(prefix_cache, int) or prefix_cache < 0:
            raise ValueError(f"prefix_cache must be an int >= 0 (0 = off), got {prefix_cache!r}")
        if not 0 <= theta < 1:
            raise ValueError(f"theta must be in [0, 1), got {theta!r}")
        if lm is not None:
            check_probing_lm(lm, "SeaKRPipeline")
        self.retriever = retriever
        self._lm = lm
        self._uncertainty = uncertainty
        self._threshold = None if threshold is None else float(threshold)
        self._calibration: Calibration | None = None
        self.mode = mode
        self.rerank = rerank
        self.select = select
        self.rationale = rationale
        self.n_candidates = n_candidates
        self.max_steps = max_steps
        self.max_docs = max_docs
        self.theta = theta
        self.step_tokens = step_tokens
        self.answer_tokens = answer_tokens
        self.demos = tuple(demos)
        self.max_doc_chars = max_doc_chars
        self.prefix_cache = prefix_cache
        self._reranker: UncertaintyReranker | None = None
        self._selector: ReasoningSelector | None = None
        self._gate: SeaKRGate | None = None

    @property
    def lm(self) -> ProbingLM:
        """The language model: the one given, else the estimator's, else the embedded one."""
        if self._lm is None:
            if self._uncertainty is not None:
                self._lm = self._uncertainty.lm
            else:
                from ..models.defaults import default_llm

                self._lm = default_llm()
        return self._lm

    @property
    def uncertainty(self) -> SelfAwareUncertainty:
        """The U estimator (SeaKR's settings on ``lm`` when none was given)."""
        if self._uncertainty is None:
            from .uncertainty import SelfAwareUncertainty

            self._uncertainty = SelfAwareUncertainty(self.lm)
        return self._uncertainty

    @property
    def threshold(self) -> float | None:
        """δ: the calibrated one, else the one given; ``None`` without either."""
        return self._calibration.threshold if self._calibration is not None else self._threshold

    @property
    def calibration_(self) -> Calibration | None:
        """How δ was calibrated (``None``: given, or not set)."""
        return self._calibration

    @property
    def gate(self) -> SeaKRGate:
        """The pipeline's gate on a question's first step, as a ``SeaKRGate``: its prompt,
        stop strings, step budget and estimator. ``calibrate`` scores questions with it."""
        if self._gate is None:
            self._gate = SeaKRGate(
                uncertainty=self.uncertainty,
                prompt_template=prompt_template(self.demos),
                stop=STEP_STOPS,
                step_tokens=self.step_tokens,
                formatted=True,
            )
        return self._gate

    def calibrate(
        self,
        questions: Sequence[str],
        target_rate: float | None = None,
        *,
        correct_without: Sequence[float] | None = None,
        correct_with: Sequence[float] | None = None,
        max_rate: float | None = None,
    ) -> SeaKRPipeline:
        """Set δ from U of the first step of ``questions``, as ``SeaKRGate.calibrate`` does:
        for a ``target_rate`` (the share of first steps that should retrieve; no labels),
        or for the best accuracy given per-question correctness without and with
        retrieval, optionally under ``max_rate``. Replaces a δ given as ``threshold``."""
        with self._cache():
            self.gate.calibrate(
                questions, target_rate, correct_without=correct_without, correct_with=correct_with, max_rate=max_rate
            )
        self._calibration = self.gate.calibration_
        logger.info("SeaKR pipeline: δ = %.4f (%s)", self.threshold, self._calibration)
        return self

    def check_ready(self) -> None:
        """Raise ``NotFittedError`` when this pipeline's mode needs δ and has none."""
        if self.mode == "multihop" and self.threshold is None:
            raise NotFittedError(
                "SeaKRPipeline has no δ: U's scale moves with the model, layer, k and alpha, so pass "
                "threshold= or call calibrate(questions, target_rate=...) before the multihop mode runs"
            )

    @property
    def reranker(self) -> UncertaintyReranker:
        """The self-aware re-ranker on this pipeline's prompt; its samples end like the
        call that reads the chosen snippet (a step, or a whole answer in simple QA)."""
        if self._reranker is None:
            from .rerank import UncertaintyReranker

            stop = STEP_STOPS if self.mode == "multihop" else ANSWER_STOPS
            self._reranker = UncertaintyReranker(
                self.uncertainty, prompt_template=snippet_template(self.demos), stop=stop, formatted=True
            )
        return self._reranker

    @property
    def selector(self) -> ReasoningSelector:
        """The self-aware reasoning selector of the final answer."""
        if self._selector is None:
            from .reasoning import ReasoningSelector

            self._selector = ReasoningSelector(self.uncertainty, stop=ANSWER_STOPS, formatted=True)
        return self._selector

    # ------------------------------------------------------------------ public
    def answer(self, question: str) -> SeaKRResult:
        """Answer one question; the result holds the answer and the full trace."""
        self.check_ready()
        question = check_question(question)
        start = time.perf_counter()
        result = SeaKRResult(question=question, mode=self.mode)
        with self._cache():
            if self.mode == "multihop":
                self._final().finish(result, self._reason(result), self.selector if self.select else None)
            else:
                self._answer_once(result)
        result.seconds = time.perf_counter() - start
        return result

    def unselected_answer(
        self, question: str, steps: Sequence[str], loop_answer: str | None, documents: Sequence[str] = ()
    ) -> str:
        """The final answer without reasoning selection: the one the steps reached, else
        what the model says when "So the answer is" follows the steps (after
        ``documents``, the passages in context)."""
        return self._final().unselected(question, steps, loop_answer, documents)

    # ----------------------------------------------------------------- helpers
    def _cache(self) -> contextlib.AbstractContextManager[None]:
        """The LM's prompt-prefix cache for the duration of one question (or calibration)."""
        return self.lm.prefix_cache(self.prefix_cache) if self.prefix_cache else contextlib.nullcontext()

    def _final(self) -> FinalAnswer:
        """The writer of the final answer (SPEC §4.4), on this pipeline's prompt and settings."""
        return FinalAnswer(self._prompt, self._greedy, self.rationale, self.step_tokens, self.answer_tokens)

    def _prompt(self, question: str, steps: Sequence[str] = (), documents: Sequence[str] = ()) -> str:
        return build_prompt(question, steps, documents, demos=self.demos, max_doc_chars=self.max_doc_chars)

    def _greedy(self, prompt: str, stop: Sequence[str], max_new_tokens: int) -> Generation:
        return self.lm.generate(prompt, max_new_tokens=max_new_tokens, stop=list(stop), formatted=True)[0]

    def _search(self, query: str, read: Sequence[Hit], step: Step) -> list[Hit]:
        """The best ``n_candidates`` snippets not read yet. A failing retriever is recorded
        on the step and yields no snippet, so the question still gets an answer."""
        used = {h.id for h in read}
        try:
            hits = self.retriever.search(query, k=self.n_candidates + len(used))
        except Exception as exc:  # any backend fault: go on without documents
            logger.warning("retrieval failed for %r: %s", query, exc)
            step.error = f"retrieval failed: {type(exc).__name__}: {exc}"
            return []
        return [h for h in hits if h.id not in used][: self.n_candidates]

    def _choose(self, hits: list[Hit], question: str, steps: Sequence[str], step: Step) -> Hit:
        """The snippet to read next (SPEC §4.3): lowest U after reading it, or BM25's first."""
        step.candidates = _candidates(hits)
        best = 0
        if self.rerank:
            snippets = [clip_passage(h.as_passage(), self.max_doc_chars) for h in hits]
            ranked = self.reranker.rerank(question, snippets, reasoning=" ".join(steps))
            for r in ranked:
                # No estimate: the estimator failed on that snippet (the re-ranker put it last).
                step.candidates[r.index].uncertainty = None if r.estimate is None else r.estimate.value
            best = ranked[0].index
            step.chosen_uncertainty = step.candidates[best].uncertainty
        step.chosen = hits[best].id
        return hits[best]

    # ------------------------------------------------ simple QA and baselines
    def _answer_once(self, result: SeaKRResult) -> None:
        """Simple QA and the two baselines: at most one retrieval (with the question),
        then one chain of thought."""
        question = result.question
        step = Step(index=0, retrieve=self.mode != "no-retrieval")
        result.steps.append(step)
        result.stop_reason = "single"
        hits: list[Hit] = []
        if step.retrieve:
            step.query = question
            result.retrieval_calls = 1
            hits = self._search(question, (), step)
        if hits and self.mode == "simple":
            hits = [self._choose(hits, question, (), step)]
        elif hits:
            step.candidates = _candidates(hits)
        result.documents = [h.id for h in hits]
        passages = [h.as_passage() for h in hits]
        step.text = self._greedy(
            self._prompt(question, documents=passages), ANSWER_STOPS, self.answer_tokens
        ).text.strip()
        # A chain of thought that stops short of "So the answer is" is completed with that
        # cue, as the multi-hop routes are, so the modes are compared on their answers.
        result.loop_answer = extract_seakr_answer(step.text)  # None in the trace = the answer was forced
        result.answer = self.unselected_answer(question, [step.text] if step.text else [], result.loop_answer, passages)

    # -------------------------------------------------------- multi-hop loop
    def _reason(self, result: SeaKRResult) -> list[Hit]:
        """The iterative loop (SPEC §4.2–4.4): fills the steps, documents, retrieval calls
        and stop reason of ``result``; returns the snippets read, in order."""
        question = result.question
        steps: list[str] = []
        read: list[Hit] = []
        searched: set[str] = set()
        result.stop_reason = "max_steps"
        for index in range(self.max_steps):
            step = Step(index=index)
            result.steps.append(step)
            stop = self._step(question, steps, read, searched, step)
            if stop is None and not step.text:
                stop = "empty_step"
            if stop is not None:
                result.stop_reason = stop
                break
            steps.append(step.text)
            if extract_seakr_answer(step.text) is not None:
                result.stop_reason = "answered"
                break
            if len(read) >= self.max_docs:
                result.stop_reason = "max_docs"
                break
        result.retrieval_calls = len(searched)
        result.documents = [h.id for h in read]
        result.loop_answer = extract_seakr_answer(steps[-1]) if steps else None
        return read

    def _step(self, question: str, steps: list[str], read: list[Hit], searched: set[str], step: Step) -> str | None:
        """Fill one ``step``: the gate, and when it fires the query, search, re-ranking and
        the step generated with the chosen snippet. Returns a stop reason or ``None``."""
        check = pseudo_step(
            self.lm,
            self.uncertainty,
            self._prompt(question, steps),
            stop=STEP_STOPS,
            max_new_tokens=self.step_tokens,
            formatted=True,
        )
        pseudo = check.generation
        step.pseudo = step.text = normalize_step(pseudo.text)
        if check.estimate is not None:
            step.uncertainty, step.n_samples = check.estimate.value, check.estimate.n_samples
        step.retrieve = check.retrieves(self.threshold)  # type: ignore[arg-type]  # check_ready ran
        if not step.retrieve:
            return None
        query = build_query(
            pseudo.text,
            pseudo.token_ids,
            pseudo.token_logprobs,
            self.lm.tokenizer,
            question,
            steps[-1] if steps else "",
            theta=self.theta,
        )
        step.query, step.query_fallback = query.text, query.fallback
        key = " ".join(query.text.lower().split())
        if key in searched:
            step.text = ""
            return "repeated_query"
        searched.add(key)
        hits = self._search(query.text, read, step)
        if not hits:
            # Keep the model's own step when there is one; otherwise nothing can follow.
            return None if step.text else "no_documents"
        chosen = self._choose(hits, question, steps, step)
        read.append(chosen)
        generated = self._greedy(self._prompt(question, steps, [chosen.as_passage()]), STEP_STOPS, self.step_tokens)
        step.text = normalize_step(generated.text)
        return None


def _candidates(hits: Sequence[Hit]) -> list[Candidate]:
    return [Candidate(h.id, h.title, rank, h.score) for rank, h in enumerate(hits)]

"""What a draft answer (the LLM's answer without retrieval) says about whether
retrieving would change it: its own form, whether one cheap retrieval backs it, and
whether its kind fits the question.

A gate that may answer first can read its own draft before deciding. The draft is the
answer that will be served if the gate does not retrieve, so where the draft is
weak, retrieval has something to fix. Each column of ``draft_features`` (named in
order by ``DRAFT_FEATURE_NAMES``), and why it carries that:

Form of the draft
- ``draft_empty``: nothing left after normalisation. Nothing to serve: retrieval can
  only help.
- ``draft_hedge``: the draft declines to answer ("unknown", "not available", "I don't
  know", "no information"). A model that says it does not know usually does not,
  and a hedge is never scored correct.
- ``draft_yes_no``: the draft is "yes" or "no". Such answers are right half the time
  by chance and a passage rarely states them, so they behave unlike named answers.
- ``draft_log_words``: log(1 + words). Short, entity-like drafts are what a model
  knows; long ones ramble around what it does not.
- ``draft_repetition``: 1 − distinct words / words. A draft that loops ("The movie
  was released in 1954. The movie was released in 1976. ...") is a model lost.
- ``draft_has_number``, ``draft_has_name``: a digit or number word; a capitalised
  span (a name). The raw material of the type checks below, useful on their own
  too (a number is right or wrong outright).
- ``draft_in_question``: the share of the draft's content words that repeat the
  question. A draft that restates the question names no new entity: it evades.

Agreement with one cheap retrieval over the question (top-k passages, best first).
Only a content draft can agree (not empty, no hedge, not yes/no); for the others
these columns are 0.
- ``agree_any``: the normalised draft occurs in a passage as whole tokens
  (``answer_metrics.contains_answer`` with the passage as the text searched). A draft the
  corpus states is most likely right already, and retrieving the same passages
  would change little.
- ``agree_top``: it occurs in the best passage: the one the retrieval trusts most.
- ``agree_share``: the share of the passages it occurs in.
- ``overlap_best``: the largest share of the draft's distinct words found in one
  passage: partial support ("Troy Baker" against "Troy Edward Baker").

The retrieval itself
- ``bm25_top``: log(1 + the best passage's score). A high score means the question's
  words meet a passage well: retrieval is likely to find something useful.
- ``bm25_gap``: (best − second) / best. One passage standing out is a sharp hit; a
  flat list is a vague one.
- ``n_passages``: how many passages came back (0 when no query term is in the index).

Answer kind against question kind (0 when the question does not ask for that kind,
or the draft is empty or a hedge: those have columns of their own)
- ``mismatch_time``: a "when" (or "what year") question answered without a date.
- ``mismatch_count``: a "how many/much" question answered without a number.
- ``mismatch_person``: a "who" question answered without a name.
- ``mismatch_yes_no``: a yes/no question answered with neither, or a yes/no answer to
  a question that asks for something else.
  A draft of the wrong kind cannot be right, whatever the model's confidence.

Bad input never raises: an empty or non-string draft reads as empty, any length is
read (a 50,000-character draft is no error, only a long one), no passages give zero
agreement and retrieval columns, and a non-finite score counts as 0. Only inputs of
different lengths (a caller's bug) raise ``ValueError``.

Where the backend gave the draft's token log-probabilities, ``logprob_features`` adds
four columns (``LOGPROB_FEATURE_NAMES``): how unsure the model was while writing it.

``read_draft`` gives one row's reading, from which both its feature values and
``explain``'s short human-readable reasons come.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..records.answer_metrics import contains_answer, normalize_answer
from ..records.token_logprobs import TokenLogprob
from .certainty import parse_certainty
from .question_features import question_opening
from .token_uncertainty import answer_tokens, position_entropy
from .word_rarity import capitalised_spans, content_words

DRAFT_FEATURE_NAMES: tuple[str, ...] = (
    "draft_empty",
    "draft_hedge",
    "draft_yes_no",
    "draft_log_words",
    "draft_repetition",
    "draft_has_number",
    "draft_has_name",
    "draft_in_question",
    "agree_any",
    "agree_top",
    "agree_share",
    "overlap_best",
    "bm25_top",
    "bm25_gap",
    "n_passages",
    "mismatch_time",
    "mismatch_count",
    "mismatch_person",
    "mismatch_yes_no",
)

#: Whole drafts (normalised) that decline to answer, as short-answer prompts get them.
_TERSE_HEDGES = frozenset(
    {
        "unknown",
        "none",
        "none known",
        "na",
        "not applicable",
        "not available",
        "not specified",
        "not known",
        "not mentioned",
        "not provided",
        "not given",
        "not stated",
        "no answer",
        "no information",
        "no data",
        "no record",
        "unclear",
        "uncertain",
    }
)
#: Hedges anywhere in a longer draft ("there is no information about ...").
_HEDGE_PHRASES = re.compile(
    r"\b(?:not (?:available|specified|mentioned|provided|stated|known)"
    r"|(?:is|are|remains?) unknown"
    r"|there (?:is|are) no (?:information|record|data|evidence|answer|reason))\b"
)
#: A yes/no answer: the word alone or before punctuation ("No, he did not"; not "No Doubt").
_YES_NO = re.compile(r"\s*(?:yes|no)\b\s*(?:[,.;:!]|$)", re.IGNORECASE)
_TIME_NOUN = re.compile(r"\b(?:what|which) (?:year|date|decade|century|month|day)\b")
_TIME_WORDS = re.compile(
    r"\d|\b(?:january|february|march|april|may|june|july|august|september|october|november|december"
    r"|spring|summer|autumn|fall|winter|century|centuries|decade|bc|bce|ad|ce|today|never)\b"
)
_NUMBER_WORDS = re.compile(
    r"\d|\b(?:zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen"
    r"|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred"
    r"|thousand|million|billion|trillion|dozen|dozens|hundreds|thousands|millions|several|none)\b"
)


def hedge(draft: str) -> str | None:
    """The words by which ``draft`` declines to answer, or ``None`` when it does not.

    A whole draft that is a non-answer ("Not available", "unknown", "N/A"), a refusal
    or stated doubt as the verbalized gate reads one (``parse_certainty``: "I don't
    know", "not sure", "uncertain"), or a hedging phrase inside a longer draft.
    """
    normalised = normalize_answer(draft)
    if normalised in _TERSE_HEDGES:
        return draft.strip()
    parse = parse_certainty(draft)
    if parse.uncertain and parse.marker:
        return parse.marker
    found = _HEDGE_PHRASES.search(draft.lower())
    return found.group() if found else None


def answer_kind(question: str) -> str | None:
    """The kind of answer a question asks for: ``"time"``, ``"count"``, ``"person"``,
    ``"yes_no"``, or ``None`` (any other: a place, a thing, a description)."""
    lowered = question.lower()
    opening = question_opening(re.findall(r"[a-z0-9']+", lowered))
    if opening["wh_when"] or _TIME_NOUN.search(lowered):
        return "time"
    if opening["wh_count"]:
        return "count"
    if opening["wh_who"]:
        return "person"
    if opening["wh_yes_no"]:
        return "yes_no"
    return None


@dataclass(frozen=True)
class DraftReading:
    """One draft read against its question and passages (see the module docstring).

    ``containing``: 0-based indices of the passages the draft occurs in;
    ``overlap_passage``: the passage sharing most of its words (``None``: no passage);
    ``mismatch``: the question's answer kind the draft fails (``None``: no mismatch).
    """

    kind: str | None
    empty: bool
    hedge: str | None
    yes_no: bool
    words: int
    repetition: float
    has_number: bool
    has_name: bool
    in_question: float
    n_passages: int
    containing: tuple[int, ...]
    overlap: float
    overlap_passage: int | None
    top_score: float
    gap: float
    mismatch: str | None

    @property
    def content(self) -> bool:
        """A draft that can agree with a passage: not empty, no hedge, not yes/no."""
        return not (self.empty or self.hedge or self.yes_no)

    def values(self) -> tuple[float, ...]:
        """The feature values, in ``DRAFT_FEATURE_NAMES`` order."""
        n = self.n_passages
        return (
            float(self.empty),
            float(self.hedge is not None),
            float(self.yes_no),
            math.log1p(self.words),
            self.repetition,
            float(self.has_number),
            float(self.has_name),
            self.in_question,
            float(bool(self.containing)),
            float(0 in self.containing),
            len(self.containing) / n if n else 0.0,
            self.overlap,
            math.log1p(self.top_score),
            self.gap,
            float(n),
            float(self.mismatch == "time"),
            float(self.mismatch == "count"),
            float(self.mismatch == "person"),
            float(self.mismatch == "yes_no"),
        )


def _mismatch(kind: str | None, draft: str, yes_no: bool, has_number: bool, has_name: bool) -> str | None:
    """The question's answer kind when the draft is not of it (or a yes/no answer to a
    question that asks for something else), else ``None``."""
    if kind == "yes_no":
        return None if yes_no else "yes_no"
    if yes_no:
        return "yes_no"
    missing = {
        "time": not _TIME_WORDS.search(draft.lower()),
        "count": not has_number,
        "person": not has_name,
    }
    return kind if kind is not None and missing[kind] else None


def _score(value: float) -> float:
    """A retrieval score as read here: non-finite or negative counts as 0."""
    return float(value) if math.isfinite(value) and value > 0 else 0.0


def read_draft(question: str, draft: str, passages: Sequence[str], scores: Sequence[float]) -> DraftReading:
    """Read one draft against its question and its retrieved passages (best first)
    with their retrieval scores."""
    if len(passages) != len(scores):
        raise ValueError(f"got {len(scores)} scores for {len(passages)} passages")
    question = question if isinstance(question, str) else ""
    draft = draft if isinstance(draft, str) else ""
    tokens = normalize_answer(draft).split()
    hedged = hedge(draft) if tokens else None
    yes_no = hedged is None and bool(_YES_NO.match(draft))
    has_number = not yes_no and bool(_NUMBER_WORDS.search(draft.lower()))
    has_name = bool(capitalised_spans(draft))
    words = content_words(draft)
    asked = set(content_words(question))
    kind = answer_kind(question)
    containing: tuple[int, ...] = ()
    overlap, overlap_passage = 0.0, None
    if tokens and hedged is None and not yes_no:
        containing = tuple(i for i, p in enumerate(passages) if contains_answer(p, draft))
        distinct = set(tokens)
        shares = [len(distinct & set(normalize_answer(p).split())) / len(distinct) for p in passages]
        if shares:
            overlap_passage = int(np.argmax(shares))
            overlap = shares[overlap_passage]
    ranked = sorted((_score(s) for s in scores), reverse=True)
    top = ranked[0] if ranked else 0.0
    return DraftReading(
        kind=kind,
        empty=not tokens,
        hedge=hedged,
        yes_no=yes_no,
        words=len(tokens),
        repetition=1.0 - len(set(tokens)) / len(tokens) if tokens else 0.0,
        has_number=has_number,
        has_name=has_name,
        in_question=sum(w in asked for w in words) / len(words) if words else 0.0,
        n_passages=len(passages),
        containing=containing,
        overlap=overlap,
        overlap_passage=overlap_passage,
        top_score=top,
        gap=(top - ranked[1]) / top if len(ranked) > 1 and top > 0 else 0.0,
        mismatch=_mismatch(kind, draft, yes_no, has_number, has_name) if tokens and hedged is None else None,
    )


def draft_features(
    questions: Sequence[str],
    drafts: Sequence[str],
    passages: Sequence[Sequence[str]],
    scores: Sequence[Sequence[float]],
) -> np.ndarray:
    """The feature matrix (one row per question, columns in ``DRAFT_FEATURE_NAMES``
    order) of each question's draft against its passages (best first; their text as
    the retriever shows it, e.g. ``Hit.as_passage()``) and their retrieval scores."""
    if not len(questions) == len(drafts) == len(passages) == len(scores):
        raise ValueError(
            f"got {len(questions)} questions, {len(drafts)} drafts, {len(passages)} passage lists "
            f"and {len(scores)} score lists; one of each per question"
        )
    rows = [read_draft(q, d, p, s).values() for q, d, p, s in zip(questions, drafts, passages, scores)]
    return np.array(rows, dtype=np.float64).reshape(len(rows), len(DRAFT_FEATURE_NAMES))


_KIND_WORDS = {
    "time": "a 'when' question answered without a date",
    "count": "a 'how many' question answered without a number",
    "person": "a 'who' question answered without a name",
}


def explain(reading: DraftReading) -> list[str]:
    """Short reasons a person can check, most telling first: what the draft is, what
    the passages say of it, and whether its kind fits the question."""
    if reading.empty:
        reasons = ["the draft is empty"]
    elif reading.hedge is not None:
        reasons = [f"the draft is a hedge: {reading.hedge!r}"]
    else:
        reasons = []
    if reading.mismatch == "yes_no":
        reasons.append(
            "a yes/no question answered with neither"
            if reading.kind == "yes_no"
            else "a yes/no answer to a question that asks for something else"
        )
    elif reading.mismatch is not None:
        reasons.append(_KIND_WORDS[reading.mismatch])
    if reading.n_passages == 0:
        reasons.append("no passages were retrieved")
    elif reading.containing:
        where = ", ".join(str(i + 1) for i in reading.containing)
        reasons.append(f"the draft appears in passage{'s' if len(reading.containing) > 1 else ''} {where}")
    elif reading.content and reading.overlap_passage is not None:
        reasons.append(
            f"the draft appears in no passage; passage {reading.overlap_passage + 1} holds "
            f"{reading.overlap:.0%} of its words"
        )
    if reading.in_question >= 0.5:
        reasons.append(f"the draft repeats the question ({reading.in_question:.0%} of its words)")
    if reading.repetition >= 0.5 and reading.words >= 10:
        reasons.append(f"the draft repeats itself ({reading.repetition:.0%} of its words are repeats)")
    return reasons


#: The draft's token uncertainty (``token_uncertainty``) as columns, where the backend
#: gave its log-probabilities: the largest and the mean per-token entropy (nats), the
#: mean surprisal (log perplexity) and 1 − the least likely token's probability.
LOGPROB_FEATURE_NAMES: tuple[str, ...] = (
    "draft_max_entropy",
    "draft_mean_entropy",
    "draft_log_perplexity",
    "draft_min_prob_need",
)
#: A cap on the entropy and surprisal columns: a log-probability of −inf (a backend's
#: "impossible" token) reads as very unsure, not as an infinite feature.
_SURPRISAL_CAP = 30.0


def logprob_features(tokens: Sequence[Sequence[TokenLogprob]]) -> np.ndarray:
    """One row per draft (columns ``LOGPROB_FEATURE_NAMES``) from its tokens with their
    log-probabilities: the answer's own tokens (``answer_tokens``), all of them when
    none is left, and zeros for a draft of no tokens. Values are capped and finite
    whatever the backend sent (a log-probability above 0 counts as 0)."""
    rows = []
    for draft in tokens:
        scored = answer_tokens(draft) or list(draft)
        if not scored:
            rows.append((0.0, 0.0, 0.0, 0.0))
            continue
        entropies = [_capped(position_entropy(t)) for t in scored]
        surprisals = [_capped(-t.logprob) for t in scored]
        rows.append(
            (
                max(entropies),
                sum(entropies) / len(entropies),
                sum(surprisals) / len(surprisals),
                1.0 - math.exp(-max(surprisals)),
            )
        )
    return np.array(rows, dtype=np.float64).reshape(len(rows), len(LOGPROB_FEATURE_NAMES))


def _capped(nats: float) -> float:
    """An entropy or surprisal read into [0, cap]: NaN (a malformed log-probability) as
    the cap, a negative one (a log-probability above 0) as 0."""
    return _SURPRISAL_CAP if math.isnan(nats) else min(max(nats, 0.0), _SURPRISAL_CAP)

"""The popularity gate: retrieve for questions about rare things (Mallen et al., 2023,
"When Not to Trust Language Models").

The paper finds that an LLM's accuracy falls with the popularity of the question's
subject entity (its Wikipedia page views) and that retrieving only for unpopular
entities beats always retrieving; the popularity threshold is chosen on a dev set.
Page views need the entity and an online lookup; here a question's words stand in
for them, rated by ``word_rarity`` (wordfreq's Zipf frequencies, blended with the
user's own corpus when the gate is fitted on one). No LLM, a few microseconds per
word.

Need score (``rule``; rarity = 8 − Zipf, so a word never seen scores 8):
- ``"min"`` (default): the rarity of the rarest content word — the subject entity
  is usually the question's rarest term, and lower-cased questions (NQ) have no
  capitals to find it by;
- ``"entity"``: the rarity of the rarest capitalised span as a phrase (the entity
  as written), the rarest content word when there is none;
- ``"mean"``: the mean rarity of the content words;
- ``"rare_count"``: how many content words are rarer than Zipf 3;
- ``"total"``: the summed rarity of the content words (grows with length).

A question with nothing to rate ("who is it?", "???", "12345": no content word, and
no capitalised span under ``"entity"``) cannot be judged: its decision is the fallback
(retrieve by default) with the reason as its ``error``. Its ``score`` stands where that
fallback does (that of a word never seen when the fallback retrieves, 0 when it does
not), so offline evaluation and the stacked gate read what the decision does. Under
``"min"``, ``"entity"`` and ``"mean"`` that is the end of the scale; ``"rare_count"``
and ``"total"`` have no end, so there a threshold calibrated above one rare word (or
8) lets ``score`` say "no retrieval" where the decision falls back to retrieval.

Threshold: until calibrated, retrieve when the rarity passes that of a word met
fewer than once in a million words (Zipf 3; one such word for ``rare_count``, two
for ``total``). ``fit_outcomes`` sets it as the paper does: the threshold with the
best accuracy on the given outcome records.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar, Literal, Self

import numpy as np

from ..errors import GateLoadError
from ..persistence.saved_format import load_array, read_json_object, save_array
from ..records.data import CorpusRecord, OutcomeRecord
from ..records.selfknowledge import outcome_scores
from ..signals.word_rarity import RARE_ZIPF, TOP_ZIPF, QuestionRarity, WordRarity, content_words
from .base.assessment import Assessment
from .base.constraints import OneOf
from .base.gate import Gate

logger = logging.getLogger(__name__)

Rule = Literal["min", "entity", "mean", "rare_count", "total"]
_RULES = ("min", "entity", "mean", "rare_count", "total")
_VOCABULARY_FILE = "vocabulary.json"
_RARE = TOP_ZIPF - RARE_ZIPF
_DEFAULT_THRESHOLDS = {"min": _RARE, "entity": _RARE, "mean": _RARE, "rare_count": 0.0, "total": 2 * _RARE}


#: The need score of a word never seen, under each rule: where an unjudged question
#: that falls back to retrieval sits on the scale.
_NEVER_SEEN = {"min": TOP_ZIPF, "entity": TOP_ZIPF, "mean": TOP_ZIPF, "rare_count": 1.0, "total": TOP_ZIPF}


def can_rate(rated: QuestionRarity, rule: Rule) -> bool:
    """Whether ``rule`` has anything to read in this rated question."""
    return bool(rated.content_zipfs) or (rule == "entity" and bool(rated.span_zipfs))


def need_score(rated: QuestionRarity, rule: Rule) -> float:
    """The need score of one rated question under ``rule`` (0 without content words)."""
    if not can_rate(rated, rule):
        return 0.0
    # can_rate: content words, or (the entity rule) entity spans, to read
    if rule == "min":
        return TOP_ZIPF - min(rated.content_zipfs)
    if rule == "entity":
        return TOP_ZIPF - min(rated.span_zipfs or rated.content_zipfs)
    if rule == "mean":
        return TOP_ZIPF - sum(rated.content_zipfs) / len(rated.content_zipfs)
    if rule == "rare_count":
        return float(rated.n_rare)
    return float(sum(TOP_ZIPF - z for z in rated.content_zipfs))


class PopularityGate(Gate):
    """Retrieve when the question's words are rare (an unpopular subject).

    Args:
        rule: how a question's word rarities become its need score (see the module).
        fallback_retrieve: the decision taken when a question fails.
    """

    name = "popularity"
    _fitted_state = ("_rarity",)
    _parameter_constraints: ClassVar[dict[str, Any]] = {"rule": OneOf(*_RULES)}

    def __init__(self, *, rule: Rule = "min", fallback_retrieve: bool = True) -> None:
        super().__init__(fallback_retrieve=fallback_retrieve)
        self.rule = rule
        self._rarity: WordRarity | None = None

    @property
    def is_fitted(self) -> bool:
        return True  # wordfreq's frequencies need no fitting

    @property
    def rarity_(self) -> WordRarity:
        """The word frequencies in use (wordfreq's, blended with a fitted corpus's)."""
        return self._rarity or WordRarity()

    def fit(self, corpus: Iterable[str | CorpusRecord]) -> Self:
        """Blend in the word frequencies of the user's own corpus (texts or corpus records)."""
        texts = [f"{r.title} {r.text}" if isinstance(r, CorpusRecord) else r for r in corpus]
        if not all(isinstance(t, str) for t in texts):
            raise ValueError("the corpus must hold texts (str) or CorpusRecord objects")
        rarity = WordRarity.from_texts(texts)
        if not rarity.has_corpus:
            raise ValueError("the corpus holds no words; fit on texts with words, or do not fit at all")
        self._rarity = rarity
        logger.info("popularity: %d corpus tokens, %d distinct words", rarity.total, len(rarity.counts))
        return self

    def _fit_outcomes(self, records: list[OutcomeRecord], metric: str) -> None:
        """The paper's threshold: the one with the best accuracy on these outcome records."""
        a, b = outcome_scores(records, metric)
        self.calibrate_scores(self.score([r.question for r in records]), correct_without=a, correct_with=b)

    def _default_threshold(self) -> float:
        return _DEFAULT_THRESHOLDS[self.rule]

    def _score(self, questions: list[str]) -> Assessment:
        rarity = self.rarity_
        rated = [rarity.rate(q) for q in questions]
        judged = [can_rate(r, self.rule) for r in rated]
        unjudged = _NEVER_SEEN[self.rule] if self.fallback_retrieve else 0.0
        scores = np.array([need_score(r, self.rule) if ok else unjudged for r, ok in zip(rated, judged)])
        details: list[dict[str, Any]] = [
            {
                "rule": self.rule,
                "words": dict(zip(content_words(q), r.content_zipfs)),
                "min_zipf": r.min_zipf,
                "min_span_zipf": r.min_span_zipf,
            }
            for q, r in zip(questions, rated)
        ]
        nothing = "no content word" + (" or capitalised name" if self.rule == "entity" else "")
        fallbacks = [None if ok else f"{nothing} to judge the subject's popularity by" for ok in judged]
        return Assessment(scores, details, fallbacks=fallbacks)

    # ------------------------------------------------------------------ persistence
    def _save_state(self, directory: Path) -> dict[str, Any]:
        if self._rarity is None:
            return {"corpus": False}
        words = sorted(self._rarity.counts)
        (directory / _VOCABULARY_FILE).write_text(json.dumps({"words": words}, ensure_ascii=False), encoding="utf-8")
        save_array(directory, "counts.npy", np.array([self._rarity.counts[w] for w in words], dtype=np.int64))
        return {"corpus": True, "total": self._rarity.total}

    def _load_state(self, directory: Path, state: dict[str, Any]) -> None:
        if state.get("corpus") is False:
            self._rarity = None
            return
        if state.get("corpus") is not True:
            raise GateLoadError(f"{directory}: field 'state.corpus' must be true or false")
        words = read_json_object(directory / _VOCABULARY_FILE).get("words")
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise GateLoadError(f"{directory}: file {_VOCABULARY_FILE!r} must hold a list of words")
        counts = load_array(directory, "counts.npy")
        if counts.shape != (len(words),) or counts.dtype.kind not in "iu" or np.any(counts < 1):
            raise GateLoadError(f"{directory}: file 'counts.npy' must hold one positive count per word")
        if state.get("total") != int(counts.sum()):
            raise GateLoadError(f"{directory}: field 'state.total' does not match the saved counts")
        self._rarity = WordRarity(dict(zip(words, counts.tolist())), int(counts.sum()))

"""Do the drafts a gate reads look like the drafts it was fitted on?

A draft-check gate learns what a draft's form and its agreement with the passages say
*of one model's drafts*: the shipped gate learned them from Llama-3.1-8B's few-word
answers. Another model's drafts can read quite otherwise (long, parenthetical answers
that rarely occur verbatim in a passage), and then the gate's strongest signal, the
draft's agreement with the passages, may even point the wrong way. Nothing about the
gate's scores says so; the drafts themselves do.

``DraftProfile`` summarises a set of drafts, each read against its question's
passages (``signals.draft.DraftReading``): their count, the mean and spread of their
length in words (of the normalised draft) and of its log, log(1 + words), as the
combiner reads it (``draft_log_words``), the share that hedge (``reading.hedge``), and
the share of content drafts (not empty, no hedge, not yes/no) that occur in a passage
(``agree_any``). A gate records the profile of its training drafts when it is
fitted and saves it with its state.

``DraftWatch`` keeps the same statistics over the most recent drafts the gate reads
(a window of ``WINDOW`` drafts; thread-safe) and compares them with the training
profile (``DraftDrift``). The rule, once at least ``MIN_DRAFTS`` recent drafts are in:

- the length is *far* when a two-sample z-test on the mean log length, log(1 + words)
  (Welch's standard error, each side's own spread), gives ``|z| >= Z_LIMIT`` **and**
  the means differ by at least ``max(LENGTH_EFFECT x its training spread,
  MIN_LOG_LENGTH)``. On the log, as the combiner reads it: a few very long drafts
  among the training ones do not hide that most recent drafts are twice as long;
- the hedge rate and the agreement rate are *far* when a two-proportion z-test (pooled
  proportion) gives ``|z| >= Z_LIMIT`` **and** the rates differ by at least
  ``RATE_EFFECT`` (absolute); the agreement rate counts content drafts only.

Both parts are needed: with hundreds of drafts a test alone flags differences too small
to matter, and with few drafts a large difference alone may be chance. The first time
a statistic is far, the watch logs one warning naming it ("drafts look unlike the
training drafts: mean length 14.2 words against 2.1 ..."); the comparison stays
readable (``DraftWatch.comparison``, a gate's ``draft_drift_``) for a server's stats.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .draft import DraftReading

logger = logging.getLogger(__name__)

#: Recent drafts read before the comparison is judged.
MIN_DRAFTS = 50
#: Recent drafts the comparison keeps (the oldest drop out).
WINDOW = 500
#: The |z| from which a difference is taken for more than chance.
Z_LIMIT = 3.0
#: The least difference in mean log length that matters, in training spreads ...
LENGTH_EFFECT = 0.5
#: ... and at least this much (about a quarter longer or shorter).
MIN_LOG_LENGTH = 0.25
#: The least difference in a rate (hedges, agreement) that matters, absolute.
RATE_EFFECT = 0.10
#: The statistics compared, as ``DraftDrift.far`` names them.
STATISTICS = ("length", "hedge_rate", "agreement_rate")


@dataclass(frozen=True)
class DraftProfile:
    """Statistics of a set of drafts (see the module): ``drafts`` read, the mean and
    standard deviation of their length in words and of log(1 + words), the share that
    hedge, and among the ``content_drafts`` the share that occur in a passage."""

    drafts: int
    mean_words: float
    sd_words: float
    mean_log_words: float
    sd_log_words: float
    hedge_rate: float
    content_drafts: int
    agreement_rate: float

    @classmethod
    def of(cls, readings: Iterable[DraftReading]) -> DraftProfile:
        """The profile of these drafts' readings."""
        return cls.of_counts([_row(r) for r in readings])

    @classmethod
    def of_counts(cls, rows: Sequence[tuple[int, bool, bool, bool]]) -> DraftProfile:
        """The profile of rows ``(words, hedged, content, agrees)``, one per draft."""
        n = len(rows)
        words = [float(w) for w, _, _, _ in rows]
        mean, sd = _mean_sd(words)
        mean_log, sd_log = _mean_sd([math.log1p(w) for w in words])
        content = [agrees for _, _, is_content, agrees in rows if is_content]
        return cls(
            drafts=n,
            mean_words=mean,
            sd_words=sd,
            mean_log_words=mean_log,
            sd_log_words=sd_log,
            hedge_rate=sum(hedged for _, hedged, _, _ in rows) / n if n else 0.0,
            content_drafts=len(content),
            agreement_rate=sum(content) / len(content) if content else 0.0,
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON object a gate saves (``state.draft_profile``)."""
        return {
            "drafts": self.drafts,
            "mean_words": self.mean_words,
            "sd_words": self.sd_words,
            "mean_log_words": self.mean_log_words,
            "sd_log_words": self.sd_log_words,
            "hedge_rate": self.hedge_rate,
            "content_drafts": self.content_drafts,
            "agreement_rate": self.agreement_rate,
        }

    @classmethod
    def from_dict(cls, value: object, where: str) -> DraftProfile:
        """The profile ``to_dict`` wrote; ``ValueError`` naming the field of ``where``
        (e.g. ``"state.draft_profile"``) that is missing or out of range."""
        if not isinstance(value, dict):
            raise ValueError(f"field {where!r} must be an object")
        counts = {}
        for name in ("drafts", "content_drafts"):
            count = value.get(name)
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise ValueError(f"field '{where}.{name}' must be a count, got {count!r}")
            counts[name] = count
        figures = {}
        for name in ("mean_words", "sd_words", "mean_log_words", "sd_log_words", "hedge_rate", "agreement_rate"):
            figure = value.get(name)
            if isinstance(figure, bool) or not isinstance(figure, (int, float)) or not math.isfinite(figure):
                raise ValueError(f"field '{where}.{name}' must be a finite number, got {figure!r}")
            if figure < 0 or (name.endswith("_rate") and figure > 1):
                raise ValueError(f"field '{where}.{name}' is out of range: {figure!r}")
            figures[name] = float(figure)
        if counts["content_drafts"] > counts["drafts"]:
            raise ValueError(f"field '{where}.content_drafts' is more than '{where}.drafts'")
        return cls(
            drafts=counts["drafts"],
            mean_words=figures["mean_words"],
            sd_words=figures["sd_words"],
            mean_log_words=figures["mean_log_words"],
            sd_log_words=figures["sd_log_words"],
            hedge_rate=figures["hedge_rate"],
            content_drafts=counts["content_drafts"],
            agreement_rate=figures["agreement_rate"],
        )


def _mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """The mean and (population) standard deviation; zeros for no values."""
    if not values:
        return 0.0, 0.0
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def _row(reading: DraftReading) -> tuple[int, bool, bool, bool]:
    """What a profile counts of one reading: words, hedged, a content draft, agrees."""
    return reading.words, reading.hedge is not None, reading.content, bool(reading.containing)


@dataclass(frozen=True)
class DraftDrift:
    """Recent drafts against the training drafts (the module's rule).

    ``z``: each statistic's test statistic (recent minus training; 0 when there is
    nothing to compare); ``far``: the statistics far from training, by the rule, once
    ``judged`` (at least ``min_drafts`` recent drafts)."""

    training: DraftProfile
    recent: DraftProfile
    z: dict[str, float]
    far: tuple[str, ...]
    min_drafts: int

    @property
    def judged(self) -> bool:
        """Whether enough recent drafts were read for the rule to be applied."""
        return self.recent.drafts >= self.min_drafts

    @property
    def drifted(self) -> bool:
        """Whether any statistic is far from training."""
        return bool(self.far)

    def describe(self) -> str:
        """The far statistics in words, recent against training."""
        parts = []
        for name in self.far:
            if name == "length":
                parts.append(f"mean length {self.recent.mean_words:.1f} words against {self.training.mean_words:.1f}")
            elif name == "hedge_rate":
                parts.append(f"hedges {self.recent.hedge_rate:.0%} against {self.training.hedge_rate:.0%}")
            else:
                parts.append(
                    f"agreement with the passages {self.recent.agreement_rate:.0%} against "
                    f"{self.training.agreement_rate:.0%}"
                )
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """A JSON object for a person or a server's stats."""
        return {
            "training": self.training.to_dict(),
            "recent": self.recent.to_dict(),
            "z": dict(self.z),
            "far": list(self.far),
            "judged": self.judged,
            "drifted": self.drifted,
            "min_drafts": self.min_drafts,
        }


def compare(training: DraftProfile, recent: DraftProfile, min_drafts: int = MIN_DRAFTS) -> DraftDrift:
    """``recent`` against ``training`` by the module's rule."""
    z = {
        "length": _mean_z(training, recent),
        "hedge_rate": _rate_z(training.hedge_rate, training.drafts, recent.hedge_rate, recent.drafts),
        "agreement_rate": _rate_z(
            training.agreement_rate, training.content_drafts, recent.agreement_rate, recent.content_drafts
        ),
    }
    differences = {
        "length": (
            recent.mean_log_words - training.mean_log_words,
            max(LENGTH_EFFECT * training.sd_log_words, MIN_LOG_LENGTH),
        ),
        "hedge_rate": (recent.hedge_rate - training.hedge_rate, RATE_EFFECT),
        "agreement_rate": (recent.agreement_rate - training.agreement_rate, RATE_EFFECT),
    }
    far: tuple[str, ...] = ()
    if recent.drafts >= min_drafts:
        far = tuple(
            name for name in STATISTICS if abs(z[name]) >= Z_LIMIT and abs(differences[name][0]) >= differences[name][1]
        )
    return DraftDrift(training, recent, z, far, min_drafts)


def _mean_z(training: DraftProfile, recent: DraftProfile) -> float:
    """The two-sample z of the mean log lengths (Welch's standard error)."""
    if training.drafts == 0 or recent.drafts == 0:
        return 0.0
    se = math.sqrt(training.sd_log_words**2 / training.drafts + recent.sd_log_words**2 / recent.drafts)
    difference = recent.mean_log_words - training.mean_log_words
    if se == 0:
        return 0.0 if difference == 0 else math.copysign(math.inf, difference)
    return difference / se


def _rate_z(p_training: float, n_training: int, p_recent: float, n_recent: int) -> float:
    """The two-proportion z (pooled proportion); 0 when either side has no drafts."""
    if n_training == 0 or n_recent == 0:
        return 0.0
    pooled = (p_training * n_training + p_recent * n_recent) / (n_training + n_recent)
    se = math.sqrt(pooled * (1.0 - pooled) * (1.0 / n_training + 1.0 / n_recent))
    return 0.0 if se == 0 else (p_recent - p_training) / se


class DraftWatch:
    """The running comparison of a gate's recent drafts with its training drafts:
    ``observe`` each batch of readings (from any thread), read ``comparison()``. The
    first comparison that finds a statistic far logs one warning; later ones only
    update the comparison.

    Args:
        training: the training drafts' profile.
        who: the gate's name, for the warning.
        window: the recent drafts kept.
        min_drafts: the recent drafts needed before the rule is applied.
    """

    def __init__(self, training: DraftProfile, who: str, *, window: int = WINDOW, min_drafts: int = MIN_DRAFTS) -> None:
        if window < min_drafts:
            raise ValueError(f"window ({window}) must hold at least min_drafts ({min_drafts}) drafts")
        self.training = training
        self.who = who
        self.min_drafts = min_drafts
        self._recent: deque[tuple[int, bool, bool, bool]] = deque(maxlen=window)
        self._lock = threading.Lock()
        self._warned = False

    def observe(self, readings: Iterable[DraftReading]) -> None:
        """Count these drafts among the recent ones, and warn the first time they look
        unlike the training drafts."""
        rows = [_row(r) for r in readings]
        if not rows:
            return
        with self._lock:
            self._recent.extend(rows)
            if self._warned:
                return
            drift = compare(self.training, DraftProfile.of_counts(list(self._recent)), self.min_drafts)
            if not drift.drifted:
                return
            self._warned = True
        logger.warning(
            "%s: drafts look unlike the training drafts: %s (over the last %d drafts, against %d training drafts); "
            "the gate's reading of a draft may not hold for them: fit the gate on this model's outcomes",
            self.who,
            drift.describe(),
            drift.recent.drafts,
            drift.training.drafts,
        )

    def comparison(self) -> DraftDrift | None:
        """The recent drafts against the training ones (``None`` before any was read)."""
        with self._lock:
            rows = list(self._recent)
        if not rows:
            return None
        return compare(self.training, DraftProfile.of_counts(rows), self.min_drafts)

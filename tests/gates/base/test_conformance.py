"""Every registered gate passes the conformance checks (``adaptive_gates.gates.base.conformance``):
parameters, clone, save/load, sync against async, batch against single, bad input, and
no reading of other objects' private attributes. Each gate is built fitted on real
outcome records, with the real embedder and the embedded SmolLM2."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from adaptive_gates import (
    BM25DifficultyGate,
    BudgetedGate,
    CascadeGate,
    DraftCheckGate,
    Gate,
    LogprobGate,
    PopularityGate,
    SeaKRGate,
    SKRClassifierGate,
    SKRIclGate,
    SKRKnnGate,
    SKRPromptGate,
    StackedGate,
    ThrustGate,
    VerbalizedGate,
)
from adaptive_gates.gates.base.conformance import GATE_CHECKS
from adaptive_gates.models import LocalChatModel
from adaptive_gates.retrieval import BM25Retriever
from support.shared_data import packaged_wiki_paragraphs

#: How each registered gate is built and fitted, from (records, embedder, chat, lm).
#: Every new token is one more pass of SmolLM2 in each of a check's decisions, so the
#: LLM gates get the fewest that still give a scored decision (or, for verbalized
#: without a judge, the fallback its longer replies give too: they state no certainty):
#: one new token each, and two samples for SeaKR's uncertainty.
BUILDERS: dict[str, Callable[..., Gate]] = {
    "skr-knn": lambda r, e, c, lm: SKRKnnGate(e, k=5).fit_outcomes(r),
    "skr-cls": lambda r, e, c, lm: SKRClassifierGate(e).fit_outcomes(r),
    "thrust": lambda r, e, c, lm: ThrustGate(e).fit([x.question for x in r]),
    "bm25-difficulty": lambda r, e, c, lm: BM25DifficultyGate().fit([x.question for x in r]),
    "popularity": lambda r, e, c, lm: PopularityGate(),
    "stacked": lambda r, e, c, lm: StackedGate(members="popularity", embedder=e).fit_outcomes(r),
    "verbalized": lambda r, e, c, lm: VerbalizedGate(c, max_tokens=1, judge=False),
    "logprob": lambda r, e, c, lm: LogprobGate(c, max_tokens=1),
    "skr-prompt": lambda r, e, c, lm: SKRPromptGate(c, max_tokens=1),
    "skr-icl": lambda r, e, c, lm: SKRIclGate(c, e, n_demos=2, max_tokens=1).fit_outcomes(r),
    "seakr": lambda r, e, c, lm: SeaKRGate(
        lm, uncertainty={"k": 2, "max_new_tokens": 1}, step_tokens=1, threshold=-6.0
    ),
    "draft-check": lambda r, e, c, lm: DraftCheckGate(
        c, _corpus_retriever(), e, embedding_dims=4, max_tokens=1
    ).fit_outcomes(r),
    "cascade": lambda r, e, c, lm: CascadeGate(SKRKnnGate(e, k=5).fit_outcomes(r), PopularityGate(), band=(0.3, 0.7)),
    "budget": lambda r, e, c, lm: BudgetedGate(SKRKnnGate(e, k=5).fit_outcomes(r), target_rate=0.3).calibrate(
        [x.question for x in r[:40]]
    ),
}


#: Settings of a registered gate that decide otherwise, checked as well: the draft-check
#: gate's cold start (no fit: it decides from the model's self-report).
VARIANTS: dict[str, Callable[..., Gate]] = {
    "draft-check cold start": lambda r, e, c, lm: DraftCheckGate(c, _corpus_retriever(), max_tokens=1, cold_start=True),
}


def _corpus_retriever() -> BM25Retriever:
    """BM25 over real Wikipedia passages that install with the package set."""
    return BM25Retriever.from_records(packaged_wiki_paragraphs()[:300])


def test_every_registered_gate_of_the_package_has_a_builder():
    # the package's own gates: a test's or a user's subclass registers itself too
    package = [name for name in Gate.gate_names() if Gate.gate_class(name).__module__.startswith("adaptive_gates.")]
    assert len(package) >= 12 and sorted(BUILDERS) == package


@pytest.fixture(scope="module")
def built(outcome_records, cached_embedder, lm) -> Callable[[str], Gate]:
    chat = LocalChatModel(lm)
    gates: dict[str, Gate] = {}

    def build(name: str) -> Gate:
        if name not in gates:
            gates[name] = {**BUILDERS, **VARIANTS}[name](outcome_records[:200], cached_embedder, chat, lm)
        return gates[name]

    return build


@pytest.fixture(scope="module")
def questions(outcome_records) -> list[str]:
    """Two questions no gate was fitted on."""
    return [outcome_records[300].question, outcome_records[301].question]


@pytest.mark.parametrize("check", sorted(GATE_CHECKS))
@pytest.mark.parametrize("name", [*sorted(BUILDERS), *sorted(VARIANTS)])
def test_the_gate_passes_the_check(name, check, built, questions, tmp_path):
    GATE_CHECKS[check](built(name), questions, tmp_path)

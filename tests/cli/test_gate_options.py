"""``--train`` with several outcome files: the records of several data sets pooled to fit
one gate, in ``eval`` (offline and live) and ``fit``, and ``load_outcome_files`` behind
it. The files are written from the bundled AdaRAGUE outcomes (Llama-3.1-8B), each data
set numbering its records from 0, so the same ids occur in both."""

import json
import logging

import pytest

from adaptive_gates import StackedGate, load_gate, load_outcome_files
from adaptive_gates.bundled.datasets import adarague_outcomes
from adaptive_gates.cli import main
from adaptive_gates.errors import DataFormatError
from adaptive_gates.gates.base.gate import Gate
from adaptive_gates.records.data import write_jsonl

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PREFIX = "adaptive-gates: error: "
#: Records per training file; the test file holds ``HELD`` of each task.
PER_FILE, HELD = 80, 30
#: The question-only stacked gate without its embedding: the quickest gate that learns.
QUICK = ["--gate", "stacked", "--option", "members=", "--option", "embedding=false", "--option", "model=logistic"]


def _numbered(records):
    """The records as JSONL objects with ids 0, 1, ... (as each data set numbers its own)."""
    return [{**r.to_json(), "id": str(i)} for i, r in enumerate(records)]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("pooled")
    nq, trivia = adarague_outcomes("nq"), adarague_outcomes("trivia")
    write_jsonl(root / "nq.jsonl", _numbered(nq[:PER_FILE]))
    write_jsonl(root / "trivia.jsonl", _numbered(trivia[:PER_FILE]))
    write_jsonl(root / "test.jsonl", _numbered(nq[400 : 400 + HELD] + trivia[400 : 400 + HELD]))
    lines = (root / "trivia.jsonl").read_text().splitlines(keepends=True)
    lines[4] = '{"id": "4", "question": "who wrote it"}\n'  # line 5: no answers
    (root / "bad.jsonl").write_text("".join(lines))
    return root


def test_load_outcome_files_concatenates_in_order_and_keeps_ids_repeated_across_files(files, caplog):
    with caplog.at_level(logging.WARNING, logger="adaptive_gates.records.data"):
        records = load_outcome_files([files / "nq.jsonl", files / "trivia.jsonl"])
    assert len(records) == 2 * PER_FILE and not caplog.records  # no warning: each file's ids are its own
    nq, trivia = adarague_outcomes("nq")[:PER_FILE], adarague_outcomes("trivia")[:PER_FILE]
    assert [r.question for r in records] == [r.question for r in nq + trivia]
    assert [r.id for r in records] == [str(i) for i in range(PER_FILE)] * 2
    assert load_outcome_files(files / "nq.jsonl") == records[:PER_FILE]  # one path alone

    # within one file a repeated id is still warned about, as load_outcomes does
    twice = files / "twice.jsonl"
    twice.write_text((files / "nq.jsonl").read_text() * 2)
    with caplog.at_level(logging.WARNING, logger="adaptive_gates.records.data"):
        assert len(load_outcome_files([twice, files / "trivia.jsonl"])) == 3 * PER_FILE
    assert f"{twice}: ids repeated on more than one line ({PER_FILE})" in caplog.text

    with pytest.raises(DataFormatError, match=rf"^{files / 'bad.jsonl'}:5: field 'answers' is missing$"):
        load_outcome_files([files / "nq.jsonl", files / "bad.jsonl"])
    with pytest.raises(ValueError, match="no outcome files"):
        load_outcome_files([])


def test_eval_fits_on_the_records_of_every_train_file(files, tmp_path, capsys):
    out = tmp_path / "r.json"
    argv = ["eval", "--gate", "stacked", "--option", "members=", "--train", str(files / "nq.jsonl")]
    argv += [str(files / "trivia.jsonl"), "--test", str(files / "test.jsonl"), "--json", str(out)]
    assert main(argv) == 0
    report = json.loads(out.read_text())
    assert report["gate"] == "stacked" and report["n_train"] == 2 * PER_FILE and report["n"] == 2 * HELD
    assert 0 < report["threshold"] < 1  # the question-only gate's blend over the embedding
    captured = capsys.readouterr()
    assert captured.out.startswith(f"stacked: n={2 * HELD} ") and "repeated" not in captured.err


def test_fit_saves_a_gate_fitted_on_every_train_file(files, tmp_path, capsys):
    out = tmp_path / "gate"
    argv = ["fit", *QUICK, "--train", str(files / "nq.jsonl"), str(files / "trivia.jsonl"), "--out", str(out)]
    assert main(argv) == 0
    gate = load_gate(out)
    assert isinstance(gate, StackedGate) and gate.members == "" and gate.model == "logistic"
    assert json.loads((out / "config.json").read_text())["state"]["rows"]["size"] == 2 * PER_FILE
    assert f"saved {gate!r} to {out}" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["eval", "fit"])
def test_a_bad_line_in_the_second_train_file_is_named_with_its_file_and_line(files, tmp_path, capsys, command):
    argv = [command, *QUICK, "--train", str(files / "nq.jsonl"), str(files / "bad.jsonl")]
    if command == "eval":
        argv += ["--test", str(files / "test.jsonl"), "--json", str(tmp_path / "r.json")]
    else:
        argv += ["--out", str(tmp_path / "gate")]
    assert main(argv) == 2
    assert capsys.readouterr().err == f"{PREFIX}{files / 'bad.jsonl'}:5: field 'answers' is missing\n"
    assert not list(tmp_path.iterdir())  # no report, no gate


def test_live_eval_fits_and_calibrates_on_every_train_file(files, corpus_path, tmp_path, monkeypatch, capsys):
    """Live, ``--train`` fits the gate and gives the questions ``--target-rate`` calibrates
    on; the run stops there (a spy) before the LLM answers."""
    seen = {}
    fit = StackedGate.fit_outcomes

    def spy_fit(self, records, metric="contains", **kwargs):
        seen["fitted"] = [r.question for r in records]
        return fit(self, records, metric, **kwargs)

    def stop_at_calibration(self, questions, target_rate=None, **kwargs):
        seen["calibrated"] = list(questions)
        raise ValueError("stopped before answering")

    monkeypatch.setattr(StackedGate, "fit_outcomes", spy_fit)
    monkeypatch.setattr(Gate, "calibrate", stop_at_calibration)
    qa = tmp_path / "qa.jsonl"
    write_jsonl(qa, [{"id": r.id, "question": r.question, "answers": r.answers} for r in adarague_outcomes("nq")[-2:]])

    def live(*train):
        argv = ["eval", "--live", *QUICK, "--train", *map(str, train), "--test", str(qa)]
        return main([*argv, "--corpus", str(corpus_path), "--json", str(tmp_path / "r.json"), "--target-rate", "0.3"])

    assert live(files / "nq.jsonl", files / "trivia.jsonl") == 2
    assert capsys.readouterr().err == f"{PREFIX}stopped before answering\n"
    pooled = [r.question for r in load_outcome_files([files / "nq.jsonl", files / "trivia.jsonl"])]
    assert seen == {"fitted": pooled, "calibrated": pooled}

    seen.clear()
    assert live(files / "nq.jsonl", files / "bad.jsonl") == 2
    assert capsys.readouterr().err == f"{PREFIX}{files / 'bad.jsonl'}:5: field 'answers' is missing\n"
    assert seen == {}  # a bad line costs no fit


def test_the_help_says_train_files_are_pooled(capsys):
    for command in ("eval", "fit"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "--train TRAIN [TRAIN ...]" in text and "several whose records are pooled" in text

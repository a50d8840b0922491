"""The log-prob gate: its signal math on hand-computed values; the gate live over the
embedded SmolLM2 and through the real OpenAI-compatible test server; and its offline
evaluation from log-probabilities recorded with real SmolLM2 answers, through the CLI."""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from adaptive_gates import LogprobGate, OutcomeRecord, SKRKnnGate, VerbalizedGate, load_gate
from adaptive_gates.answering.answerer import ANSWER_STOP, LLMAnswerer, build_prompt, clean_answer
from adaptive_gates.bundled.datasets import packaged_qa
from adaptive_gates.cli import main
from adaptive_gates.errors import GateLoadError
from adaptive_gates.gates.base.calibration import CalibrationWarning
from adaptive_gates.gates.logprob import DEFAULT_THRESHOLDS
from adaptive_gates.models import LocalChatModel, OpenAIChatModel
from adaptive_gates.models.chat.base import TokenLogprob, user
from adaptive_gates.records.data import load_outcomes, write_jsonl
from adaptive_gates.signals.token_uncertainty import (
    SIGNALS,
    answer_tokens,
    check_signal,
    max_entropy,
    mean_entropy,
    min_prob_need,
    perplexity,
    position_entropy,
    signal_values,
)
from support.openai_server import Fault

REPO = Path(__file__).resolve().parents[2]
PREFIX = "adaptive-gates: error: "
LN = math.log

#: Questions SmolLM2-135M answers with little doubt ("The capital of Japan is Tokyo.")
#: and ones it can only make up an answer to.
CONFIDENT = ["What is the capital of Japan?", "What is the largest planet in the solar system?"]
UNSURE = ["Who won the 1937 Tasmanian chess championship?", "What was the population of Nauru in the 2021 census?"]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def tok(token: str, p: float, *top: tuple[str, float]) -> TokenLogprob:
    """A token of probability ``p`` with alternatives given as (token, probability)."""
    return TokenLogprob(token, LN(p), tuple((t, LN(q)) for t, q in top))


# ----------------------------------------------------------------------- signal math
def test_entropy_counts_the_leftover_mass_as_one_outcome():
    # 0.5 and 0.25 listed, 0.25 left over: -(.5 ln .5 + .25 ln .25 + .25 ln .25) = 1.5 ln 2.
    assert position_entropy(tok("a", 0.5, ("a", 0.5), ("b", 0.25))) == pytest.approx(1.5 * LN(2))
    # All the mass listed: the exact entropy.
    assert position_entropy(tok("a", 0.5, ("a", 0.5), ("b", 0.5))) == pytest.approx(LN(2))
    # A chosen token missing from the alternatives (sampled) is one more outcome.
    expected = -(0.6 * LN(0.6) + 0.3 * LN(0.3) + 0.1 * LN(0.1))
    assert position_entropy(tok("c", 0.1, ("a", 0.6), ("b", 0.3))) == pytest.approx(expected)
    # No alternatives: the chosen token's surprisal.
    assert position_entropy(tok("a", 0.25)) == pytest.approx(LN(4))


def test_the_four_signals_on_hand_computed_values():
    tokens = [tok("Paris", 0.5, ("Paris", 0.5), ("Lyon", 0.5)), tok(" France", 0.25)]
    assert max_entropy(tokens) == pytest.approx(LN(4))
    assert mean_entropy(tokens) == pytest.approx((LN(2) + LN(4)) / 2)
    assert perplexity(tokens) == pytest.approx(2**1.5)  # exp(-(ln .5 + ln .25) / 2)
    assert min_prob_need(tokens) == pytest.approx(0.75)
    assert list(signal_values(tokens)) == list(SIGNALS)
    assert perplexity([tok("x", 1.0)]) == 1.0 and min_prob_need([tok("x", 1.0)]) == 0.0
    with pytest.raises(ValueError, match="no tokens"):
        max_entropy([])
    with pytest.raises(ValueError, match="signal must be one of"):
        check_signal("entropy")


def test_answer_tokens_leave_out_specials_punctuation_and_edge_whitespace():
    texts = [" ", "Paris", ",", " ", " France", ".", "\n", "<|im_end|>", "</s>"]
    kept = answer_tokens([tok(t, 0.5) for t in texts])
    assert [t.token for t in kept] == ["Paris", " ", " France"]  # the inner space stays
    assert answer_tokens([tok(t, 0.5) for t in ["<eos>", "...", "\n"]]) == []


# ----------------------------------------------------------------------- live, embedded
@pytest.fixture(scope="module")
def chat():
    return LocalChatModel()


@pytest.fixture(scope="module")
def live(chat):
    """The default gate's decisions on the confident and the unsure questions (one batch)."""
    return LogprobGate(chat).decide_batch(CONFIDENT + UNSURE)


def test_confident_answers_score_below_made_up_ones_on_every_signal(live):
    for signal in SIGNALS:
        values = [d.details["signals"][signal] for d in live]
        assert max(values[: len(CONFIDENT)]) < min(values[len(CONFIDENT) :]), (signal, values)
    assert [d.score for d in live] == [d.details["signals"]["max-entropy"] for d in live]


def test_a_confident_decision_carries_the_answerers_own_answer(live, chat):
    answers = LLMAnswerer(chat).answer_batch(CONFIDENT + UNSURE)
    for decision, answer in zip(live, answers):
        assert decision.error is None and decision.gate == "logprob"
        assert decision.details["answer"] == answer and decision.llm_calls == 1
        assert decision.details["n_tokens"] >= 1 and decision.details["positions_without_alternatives"] == 0
        assert decision.retrieve == (decision.score > DEFAULT_THRESHOLDS["max-entropy"])
        assert decision.draft_answer == (None if decision.retrieve else answer)
    japan = live[0]
    assert not japan.retrieve and "Tokyo" in japan.draft_answer


def test_calibration_to_a_target_rate_and_save_load(chat, tmp_path):
    questions = [r.question for r in packaged_qa("nq-open")[:8]]
    # the answers' length proves nothing here: a short cap keeps the sixteen answers cheap
    gate = LogprobGate(chat, signal="mean-entropy", max_tokens=8)
    with pytest.warns(CalibrationWarning):
        gate.calibrate(questions, target_rate=0.5)
    decisions = gate.decide_batch(questions)
    assert sum(d.retrieve for d in decisions) == 4
    gate.save(tmp_path / "gate")
    loaded = load_gate(tmp_path / "gate", chat=chat)
    assert isinstance(loaded, LogprobGate) and loaded.signal == "mean-entropy"
    assert loaded.threshold_ == gate.threshold_ and loaded.calibration_ == gate.calibration_
    config = json.loads((tmp_path / "gate" / "config.json").read_text())
    assert config["state"] == {"chat_model": chat.model_id}
    with pytest.raises(GateLoadError, match="chat model"):
        load_gate(tmp_path / "gate", chat=OpenAIChatModel("another-model", base_url="http://127.0.0.1:9"))


def test_gates_whose_first_call_is_the_answer_say_so():
    assert LogprobGate.answers_first and VerbalizedGate.answers_first and not SKRKnnGate.answers_first
    assert LogprobGate.record_fields == ("logprobs_no_retrieval",) and SKRKnnGate.record_fields == ()


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="signal must be one of"):
        LogprobGate(signal="entropy")
    with pytest.raises(ValueError, match="top_logprobs"):
        LogprobGate(top_logprobs=0)


# ----------------------------------------------------------------------- OpenAI server
def test_through_the_openai_server_blocking_and_awaited(openai_server, openai_base_url):
    # eight tokens hold the confident answer ("The capital of Japan is Tokyo.")
    remote = LogprobGate(OpenAIChatModel(openai_server.model_id, base_url=openai_base_url), max_tokens=8)
    questions = [CONFIDENT[0], UNSURE[0]]
    blocking = remote.decide_batch(questions)
    awaited = asyncio.run(remote.adecide_batch(questions))
    assert openai_server.requests == 4  # one request (the answer) per question and call
    local = LogprobGate(LocalChatModel(batch_size=1), max_tokens=8).score(questions)  # the server answers one at a time
    for decisions in (blocking, awaited):
        assert all(d.error is None for d in decisions)
        np.testing.assert_allclose([d.score for d in decisions], local, atol=1e-4)
        assert decisions[0].score < decisions[1].score
        assert not decisions[0].retrieve and "Tokyo" in decisions[0].draft_answer


#: What the fallback's error says of each reply no model gives, served by a misbehaving server.
MISBEHAVIOUR_ERRORS = {
    Fault.LOGPROB_ABOVE_ZERO: r"MalformedReplyError: the reply's token 0 \(.+\) has log-probability 7\.0, outside",
    Fault.LOGPROB_MINUS_INF: r"MalformedReplyError: the reply's token 0 \(.+\) has log-probability -inf, outside",
    Fault.LOGPROB_NAN: r"BackendError: .*malformed logprobs in the response \(entry 0: 'logprob' must be a finite",
    Fault.EMPTY_REPLY: r"^the reply holds no answer: ''$",
    Fault.BLANK_REPLY: r"^the reply holds no answer: '\\n'$",
}


@pytest.mark.parametrize("fault", list(MISBEHAVIOUR_ERRORS))
def test_a_reply_no_model_gives_is_the_fallback_not_a_confident_answer(openai_server, openai_base_url, fault):
    openai_server.set_fault(fault)
    # Two tokens: each fault spoils the reply from its first token on.
    gate = LogprobGate(OpenAIChatModel(openai_server.model_id, base_url=openai_base_url), max_tokens=2)
    question = CONFIDENT[0]  # answered with certainty by the model itself
    for decision in (gate.decide(question), asyncio.run(gate.adecide(question))):
        assert decision.is_fallback and decision.retrieve and decision.draft_answer is None
        assert re.search(MISBEHAVIOUR_ERRORS[fault], decision.error), decision.error
    assert openai_server.requests == 2  # a reply no model gives is not asked again


# ----------------------------------------------------------------------- offline
@pytest.fixture(scope="module")
def recorded(chat, tmp_path_factory) -> Path:
    """Outcome records of 25 packaged BoolQ questions with SmolLM2's own answers, and
    the no-retrieval answer's log-probabilities (top 5) as the answerer's prompt gave them:
    20 to fit on (as many as a calibration takes without a warning), 5 to score. The
    answers with a passage are read from its first 100 characters: the log-prob gate never
    looks at them, and every prompt token costs a prefill."""
    rows = packaged_qa("boolq")[:25]
    instruction = "Answer the question with yes or no."
    options = dict(max_tokens=1, top_logprobs=5, stop=list(ANSWER_STOP))
    bare = chat.chat_batch([user(build_prompt(r.question, None, instruction)) for r in rows], **options)
    grounded = chat.chat_batch(
        [user(build_prompt(r.question, [r.context], instruction, max_passage_chars=100)) for r in rows], **options
    )
    records = [
        OutcomeRecord(
            r.id, r.question, r.answers, clean_answer(b.text), clean_answer(g.text), logprobs_no_retrieval=b.tokens
        )
        for r, b, g in zip(rows, bare, grounded)
    ]
    root = tmp_path_factory.mktemp("logprob-records")
    write_jsonl(root / "train.jsonl", [r.to_json() for r in records[:20]])
    write_jsonl(root / "test.jsonl", [r.to_json() for r in records[20:]])
    return root


#: A chat model no request could reach: offline, nothing may ask it.
UNREACHABLE = ["--chat-model", "nobody", "--base-url", "http://127.0.0.1:9/v1"]


def test_offline_eval_scores_the_recorded_logprobs_without_an_llm(recorded, tmp_path):
    out = tmp_path / "report.json"
    argv = [
        "eval",
        "--gate",
        "logprob",
        "--option",
        "signal=min-prob",
        "--train",
        str(recorded / "train.jsonl"),
        "--test",
        str(recorded / "test.jsonl"),
        "--json",
        str(out),
        *UNREACHABLE,
    ]
    assert main(argv) == 0
    report = json.loads(out.read_text())
    assert report["gate"] == "logprob" and report["n"] == 5 and report["n_train"] == 20
    test = load_outcomes(recorded / "test.jsonl")
    expected = [1 - math.exp(min(t.logprob for t in r.logprobs_no_retrieval)) for r in test]
    np.testing.assert_allclose(LogprobGate(signal="min-prob").score_records(test), expected)
    assert report["at_threshold"]["retrieval_rate"] == pytest.approx(np.mean(np.array(expected) > 0.5))


def test_fit_calibrates_on_the_recorded_logprobs(recorded, tmp_path):
    train = recorded / "train.jsonl"
    argv = [
        "fit",
        "--gate",
        "logprob",
        "--train",
        str(train),
        "--target-rate",
        "0.5",
        "--out",
        str(tmp_path / "g"),
        *UNREACHABLE,
    ]
    assert main(argv) == 0
    gate = load_gate(tmp_path / "g", chat=OpenAIChatModel("nobody", base_url="http://127.0.0.1:9/v1"))
    scores = gate.score_records(load_outcomes(train))
    assert gate.calibration_ is not None and gate.retrieves(scores).mean() == pytest.approx(0.5, abs=0.1)


def test_a_record_without_logprobs_is_an_error_naming_its_line(recorded, tmp_path, capsys):
    lines = (recorded / "test.jsonl").read_text().splitlines()
    third = json.loads(lines[2])
    del third["logprobs_no_retrieval"]
    lines[2] = json.dumps(third)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    assert (
        main(
            [
                "eval",
                "--gate",
                "logprob",
                "--train",
                str(recorded / "train.jsonl"),
                "--test",
                str(bad),
                "--json",
                str(tmp_path / "r.json"),
            ]
        )
        == 2
    )
    assert capsys.readouterr().err == (
        f"{PREFIX}{bad}:3: field 'logprobs_no_retrieval' is missing (every record must hold it here)\n"
    )
    record = load_outcomes(bad)[2]
    with pytest.raises(ValueError, match=f"record {record.id!r} has no 'logprobs_no_retrieval'"):
        LogprobGate().score_records([record])


def test_the_console_script_evaluates_offline(recorded, tmp_path):
    script = Path(sys.executable).parent / "adaptive-gates"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    out = tmp_path / "report.json"
    done = subprocess.run(
        [
            str(script),
            "eval",
            "--gate",
            "logprob",
            "--train",
            str(recorded / "train.jsonl"),
            "--test",
            str(recorded / "test.jsonl"),
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("logprob: n=5") and json.loads(out.read_text())["gate"] == "logprob"

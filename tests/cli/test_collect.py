"""Collecting outcomes through an OpenAI-compatible server: ``adaptive-gates collect
--chat-model`` end to end against the real test server (``support/openai_server.py``, the
embedded SmolLM2 behind real HTTP) through the real ``openai`` client, and the token
usage each chat model reports."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from adaptive_gates import load_outcomes
from adaptive_gates.answering.answerer import LLMAnswerer, build_prompt, clean_answer
from adaptive_gates.answering.collection import outcome_usage
from adaptive_gates.cli import main
from adaptive_gates.models import OpenAIChatModel, TokenUsage, chat_many
from adaptive_gates.models.chat.base import user
from adaptive_gates.records.data import write_jsonl
from support.openai_server import ChatCompletionsServer, Fault

pytestmark = pytest.mark.usefixtures("one_torch_thread")

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).parent / "adaptive-gates"
PREFIX = "adaptive-gates: error: "
N = 4
#: New tokens at most per answer: the token counts and log-probs are checked, not the answers.
MAX_TOKENS = 4


@pytest.fixture
def four_questions(qa_records, tmp_path) -> Path:
    """Four real questions with their gold answers, as a QA file."""
    path = tmp_path / "qa.jsonl"
    write_jsonl(path, [{"id": r.id, "question": r.question, "answers": r.answers} for r in qa_records[:N]])
    return path


@pytest.fixture(scope="module")
def request_timeout(served_chat_model, qa_records, corpus_path) -> str:
    """The client timeout for the requests below, derived from what this machine takes now
    to answer with passages (the model the test server answers with, measured once): the
    server answers one request at a time, so a request may wait behind the others in
    flight (3 at most here); ten times that is slower on a loaded machine, not red."""
    passages = [json.loads(line)["text"] for line in corpus_path.read_text().splitlines()[:2]]
    answerer = LLMAnswerer(served_chat_model)
    start = time.perf_counter()
    answerer.answer(qa_records[0].question, passages)
    return f"{10 * 3 * (time.perf_counter() - start):.1f}"


def _collect(qa: Path, corpus: Path, out: Path, server: ChatCompletionsServer, *flags: str) -> list[str]:
    return [
        "collect",
        "--qa",
        str(qa),
        "--corpus",
        str(corpus),
        "--out",
        str(out),
        "--k",
        "1",
        "--max-tokens",
        str(MAX_TOKENS),
        "--chat-model",
        server.model_id,
        "--base-url",
        server.base_url,
        *flags,
    ]


def _script_env() -> dict[str, str]:
    """The environment for the console script: it imports this checkout's package."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}


def test_usage_counts_of_the_local_model_are_its_tokenizers(served_chat_model):
    lm = served_chat_model.lm
    conversations = [user("Who wrote Hamlet?"), user("Name the largest planet of the Solar System, please.")]
    replies = served_chat_model.chat_batch(conversations, max_tokens=6, top_logprobs=1)
    for conversation, reply in zip(conversations, replies):
        # The prompt as the tokenizer encodes it (a shorter prompt's padding is not counted) ...
        assert reply.usage.prompt_tokens == len(lm.tokenizer(lm.format_prompt(conversation)).input_ids)
        # ... and every token generated, the one that ended the reply included.
        assert reply.usage.completion_tokens == len(reply.tokens) >= 1
    assert replies[0].usage.prompt_tokens < replies[1].usage.prompt_tokens
    cut = served_chat_model.chat(conversations[1], max_tokens=2)
    assert cut.finish_reason == "length" and cut.usage.completion_tokens == 2


def test_usage_of_an_openai_compatible_server_is_read_from_its_reply(openai_server, openai_base_url, request_timeout):
    import asyncio

    model = OpenAIChatModel(openai_server.model_id, base_url=openai_base_url, timeout=float(request_timeout))
    messages = user("What is the capital of France?")
    local = openai_server.chat_model.chat(messages, max_tokens=8)
    for reply in (model.chat(messages, max_tokens=8), asyncio.run(model.achat(messages, max_tokens=8))):
        assert reply.text == local.text
        assert reply.usage == local.usage and reply.usage.prompt_tokens > 0 and reply.usage.completion_tokens > 0
    # OpenAI's usage object, or a server that sends none.
    assert TokenUsage.from_openai({"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}) == TokenUsage(3, 2)
    assert TokenUsage.from_openai(None) is None and TokenUsage.from_openai({"total_tokens": 5}) is None
    assert (TokenUsage(3, 2) + TokenUsage(1, 1)).total_tokens == 7


def test_collect_through_a_server_keeps_logprobs_and_token_counts(
    openai_server, openai_base_url, four_questions, corpus_path, request_timeout, tmp_path, capsys
):
    out = tmp_path / "outcomes.jsonl"
    flags = ("--concurrency", "3", "--top-logprobs", "3", "--timeout", request_timeout, "--draft", "plain")
    argv = _collect(four_questions, corpus_path, out, openai_server, *flags)
    assert main(argv) == 0
    assert openai_server.requests == 2 * N  # each question asked once without, once with passages

    records = load_outcomes(out)
    qa = [json.loads(line) for line in four_questions.read_text().splitlines()]
    assert [r.id for r in records] == [q["id"] for q in qa]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    # The same prompts asked again: the raw replies the records were read from.
    client = OpenAIChatModel(openai_server.model_id, base_url=openai_base_url, timeout=float(request_timeout))
    answerer = LLMAnswerer(client)
    raw = chat_many(
        answerer.chat,
        [user(answerer.prompt(q["question"])) for q in qa],
        max_tokens=MAX_TOKENS,
        stop=["\n"],
        top_logprobs=3,
    )
    for record, row, reply in zip(records, rows, raw):
        # OpenAI's logprobs.content shape, three alternatives at each position.
        entries = row["logprobs_no_retrieval"]
        assert entries and all(
            set(e) == {"token", "logprob", "top_logprobs"} and len(e["top_logprobs"]) == 3 for e in entries
        )
        tokens = [t.token for t in record.logprobs_no_retrieval]
        assert tokens == [t.token for t in reply.tokens]
        assert "".join(tokens).startswith(reply.text)  # the tokens spell the reply, then what ended it
        assert record.pred_no_retrieval == clean_answer(reply.text)
        usage = row["usage"]
        assert usage["no_retrieval"]["completion_tokens"] == len(tokens)
        assert usage["one_retrieval"]["prompt_tokens"] > usage["no_retrieval"]["prompt_tokens"] > 0
        for answer in usage.values():
            assert 0 < answer["completion_tokens"] <= MAX_TOKENS  # --max-tokens bounds each answer
            assert answer["total_tokens"] == answer["prompt_tokens"] + answer["completion_tokens"]
    total = outcome_usage(records)
    assert total.prompt_tokens == sum(u["prompt_tokens"] for row in rows for u in row["usage"].values())
    assert all(row["llm"] == openai_server.model_id and "certainty_no_retrieval" not in row for row in rows)
    assert capsys.readouterr().out.strip() == (
        f"{N} outcome records of {openai_server.model_id} in {out} (plain drafts; {total.prompt_tokens} prompt "
        f"tokens, {total.completion_tokens} completion tokens)"
    )


def test_collect_asks_plain_questions_for_a_self_report_by_default(
    openai_server, openai_base_url, four_questions, corpus_path, request_timeout, tmp_path, capsys
):
    from adaptive_gates.answering.self_report import SELF_REPORT_INSTRUCTION, read_self_report

    questions = tmp_path / "traffic.txt"
    asked = [json.loads(line)["question"] for line in four_questions.read_text().splitlines()][:2]
    questions.write_text("\n".join(asked) + "\n\n", encoding="utf-8")
    out = tmp_path / "outcomes.jsonl"
    argv = _collect(questions, corpus_path, out, openai_server, "--no-logprobs", "--timeout", request_timeout)
    assert main(argv) == 0
    assert openai_server.requests == 2 * len(asked)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    client = OpenAIChatModel(openai_server.model_id, base_url=openai_base_url, timeout=float(request_timeout))
    for question, row in zip(asked, rows):
        # the answer without retrieval, asked again as collect asks it: the self-report, no stop
        reply = client.chat(user(build_prompt(question, None, SELF_REPORT_INSTRUCTION)), max_tokens=MAX_TOKENS)
        report = read_self_report(reply.text)
        assert row["question"] == question and row["answers"] == [] and row["llm"] == openai_server.model_id
        assert row["pred_no_retrieval"] == report.answer and row["certainty_no_retrieval"] == report.certainty
    assert capsys.readouterr().out.startswith(f"2 outcome records of {openai_server.model_id} in {out} (self-report")


def test_an_interrupted_collection_resumes_without_asking_a_question_twice(
    openai_server, openai_base_url, four_questions, corpus_path, request_timeout, tmp_path, capsys
):
    out = tmp_path / "outcomes.jsonl"
    flags = ("--concurrency", "3", "--batch-size", "3", "--no-logprobs", "--timeout", request_timeout)
    argv = _collect(four_questions, corpus_path, out, openai_server, *flags)
    assert main([*argv, "--limit", "1"]) == 0
    assert openai_server.requests == 2 and len(load_outcomes(out)) == 1
    first = out.read_text()
    capsys.readouterr()

    # The console script, killed while its requests are in flight (the server holds them).
    openai_server.set_fault(Fault.HANG)
    started = time.perf_counter()
    run = subprocess.Popen([str(SCRIPT), *argv], env=_script_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        while openai_server.requests < 2 + 3 and run.poll() is None:
            time.sleep(0.05)
        held = run.poll() is None and time.perf_counter() - started
    finally:
        run.kill()
        run.communicate()
    # three requests held at once, before any of them could time out, and no more
    assert held and held < float(request_timeout), (held, request_timeout)
    assert openai_server.requests == 2 + 3
    assert out.read_text() == first  # the batch in flight was not written

    openai_server.reset()  # healthy again, the request count back to zero
    # Resumed in this process: the killed run was the console script's, the resumption is the file's.
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith(f"{N} outcome records of {openai_server.model_id} in {out} (")
    assert openai_server.requests == 2 * (N - 1)  # only the three questions not yet collected
    assert out.read_text().startswith(first)
    ids = [r.id for r in load_outcomes(out)]
    qa = [json.loads(line) for line in four_questions.read_text().splitlines()]
    assert ids == [q["id"] for q in qa]  # whole, each question once
    assert all(r.logprobs_no_retrieval is None for r in load_outcomes(out))  # --no-logprobs


def test_a_server_that_is_down_is_one_error_line(four_questions, corpus_path, tmp_path):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = tmp_path / "outcomes.jsonl"
    failed = subprocess.run(
        [
            str(SCRIPT),
            "collect",
            "--qa",
            str(four_questions),
            "--corpus",
            str(corpus_path),
            "--out",
            str(out),
            "--chat-model",
            "some-model",
            "--base-url",
            f"http://127.0.0.1:{port}/v1",
        ],
        env=_script_env(),
        capture_output=True,
        text=True,
    )
    assert failed.returncode == 2 and failed.stdout == ""
    lines = failed.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{PREFIX}chat model 'some-model' at http://127.0.0.1:{port}")
    assert "cannot connect" in lines[0] and "Traceback" not in failed.stderr
    assert not out.exists() or out.read_text() == ""

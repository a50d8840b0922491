"""The LangChain examples run offline at a small size, with the embedded models and
BoolQ, and print what they promise."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from support.example_scripts import run_scripts  # the core suite's (pythonpath in pyproject.toml)

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"
DECISION = re.compile(r"^   retrieve\? (yes|no)  score (\S+)  threshold (\S+)  \(skr-knn\)$", re.M)


def _blocks(out: str) -> list[str]:
    """Each routed question's printout, from its ``Q:`` line to its answer."""
    return re.findall(r"^Q: .*?^   answer: .*?$", out, re.M | re.S)


TURNS = ["Who wrote Hamlet?", "And when did he die?", "Is the Mona Lisa in the Louvre?"]


@pytest.fixture(scope="module")
def collected(tmp_path_factory) -> tuple[Path, str, str, str]:
    """The router example collecting its outcome records (saved, so the other runs fit on
    them instead of answering the same questions again), the router fitted on the saved
    records, and the chatbot fitted on them taking ``TURNS``: the outcomes file and what
    each run printed."""
    folder = tmp_path_factory.mktemp("examples")
    outcomes, script = folder / "outcomes.jsonl", folder / "turns.txt"
    script.write_text("\n".join(TURNS) + "\n\n")
    # The vector stores hold only the passages the questions use (MiniLM encodes each one).
    router = ["--n", "3", "--n-fit", "10", "--passages", "13", "--max-tokens", "4"]
    chatbot = ["--script", str(script), "--outcomes", str(outcomes), "--window", "2", "--max-tokens", "4"]
    chatbot += ["--n-fit", "10", "--passages", "10"]
    runs = [
        ("langchain_router.py", [*router, "--save-outcomes", str(outcomes)], folder / "router.txt"),
        ("langchain_router.py", [*router, "--outcomes", str(outcomes)], folder / "router-again.txt"),
        ("chatbot.py", chatbot, folder / "chatbot.txt"),
    ]
    return outcomes, *run_scripts(EXAMPLES, runs)


def test_router_example_prints_each_decision_and_the_calls_saved(collected):
    outcomes, out, again, _ = collected
    records = [json.loads(line) for line in outcomes.read_text().splitlines()]
    assert len(records) == 10 and all(r["pred_no_retrieval"] and r["pred_one_retrieval"] for r in records)
    blocks = _blocks(out)
    assert len(blocks) == 3
    decisions = [DECISION.search(b) for b in blocks]
    assert all(decisions), out
    for block, decision in zip(blocks, decisions):
        score, threshold = float(decision[2]), float(decision[3])
        assert (decision[1] == "yes") == (score > threshold)
        # The evidence: the nearest labelled questions, which are among the collected ones.
        neighbours = re.findall(r"^     neighbour \S+ \[\s*(known|unknown)\] (.*)$", block, re.M)
        assert neighbours and all(q in {r["question"] for r in records} for _, q in neighbours)
    retrieved = sum(d[1] == "yes" for d in decisions)
    assert f"retrieval calls: {retrieved} of 3 questions ({3 - retrieved} saved against the RAG chain alone)" in out

    # Fitted on the saved records instead, the gate takes the same decisions.
    assert f"fitting on 10 outcome records from {outcomes}" in again
    assert [DECISION.search(b)[0] for b in _blocks(again)] == [d[0] for d in decisions]


def test_chatbot_script_shows_each_turns_decision_and_evidence(collected):
    outcomes, _, _, out = collected
    assert f"fitting on 10 outcome records from {outcomes}" in out
    blocks = re.findall(r"^\[(\d)\] you: (.*?)\n(.*?)^   bot: (.*?)$", out, re.M | re.S)
    assert [(int(n), q) for n, q, _, _ in blocks] == list(enumerate(TURNS, 1))
    judged = []
    for _, _question, body, answer in blocks:
        judged.append(re.search(r"^   gate judged: (.*)$", body, re.M)[1])
        decision = DECISION.search(body)
        assert decision, body
        assert (decision[1] == "yes") == (float(decision[2]) > float(decision[3]))
        # k=1: a retrieving turn shows the one passage it read, a direct turn none.
        assert len(re.findall(r"^   evidence: ", body, re.M)) == (decision[1] == "yes")
        assert answer.strip()
    assert judged[0] == repr(TURNS[0])
    # The follow-up is judged after the question it leans on (not alone, not with the reply).
    assert judged[1] == repr(f"{TURNS[0]} {TURNS[1]}")
    assert judged[2] == repr(TURNS[2])  # a question that stands alone is judged alone

"""Prompt injection against the gates that ask an LLM: decisions flipped to "no
retrieval" by attacks appended to real questions, before and after the quoting defence.

The first ``--n`` questions of AdaRAGUE NQ (packaged with the package) are decided
plain and with each attack of ``adaptive_gates.evaluation.injection.ATTACKS`` appended,
by the verbalized gate (vanilla strategy) and the SKR-prompt gate, each over three
chat models: the embedded SmolLM2 (greedy), a scripted model that obeys the last
instruction it sees, and a scripted model that takes a forged assistant turn in its
prompt as its own reply. A flip is a question that retrieved plain and does not
retrieve attacked; for the verbalized gate, a flip's draft answer would be served.

"Before" is this tree with the defence switched off: ``prompts.fill`` puts the
question and the prediction in verbatim (no ``UNTRUSTED_SLOTS`` rendering) and the
local model lets special-token text through to its tokenizer, which renders every
prompt as the package did before the defence (commit 7217f67). "After" is the tree
as shipped.

A passage can carry an attack too: the answerer (SKR layout, the package's default)
answers the ``--n`` questions from one neutral passage, then with
``injection.POISONED_PASSAGE`` put before it (it ends its passage, forges a question and
an ``Answer: Paris`` line, and orders "Paris"); counted are answers containing "Paris".
"Before" renders the passages as the package did before they were delimited (``[i]``
and the raw text).

What the defence costs on plain questions: the first ``--plain-n`` questions are
decided by both gates over SmolLM2, before and after; reported are the retrieval
rate, fallbacks (no verdict stated) and, for the verbalized gate, how many of the
drafts it would serve contain a gold answer.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/prompt_injection.py [--n 8] [--plain-n 40]

Writes benchmarks/results/prompt_injection.{md,json}; about 8 minutes with the defaults.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any
from unittest import mock

from _common import markdown_table, write_results
from adaptive_gates import SKRPromptGate, VerbalizedGate
from adaptive_gates.answering import answerer, prompts
from adaptive_gates.answering.answerer import LLMAnswerer
from adaptive_gates.bundled.datasets import adarague_outcomes
from adaptive_gates.evaluation.injection import (
    ATTACKS,
    SKR_VERDICTS,
    VERBALIZED_VERDICTS,
    ObeyingChat,
    TurnFollowingChat,
    Verdicts,
    injection_flips,
    passage_injections,
)
from adaptive_gates.models import default_llm
from adaptive_gates.models.chat.local import LocalChatModel
from adaptive_gates.records.answer_metrics import contains_answer
from adaptive_gates.records.data import OutcomeRecord

GATES: dict[str, tuple[type, Verdicts]] = {
    "verbalized": (VerbalizedGate, VERBALIZED_VERDICTS),
    "skr-prompt": (SKRPromptGate, SKR_VERDICTS),
}


@contextlib.contextmanager
def defence_off() -> Iterator[None]:
    """The package's prompts as before the defence: the untrusted slots filled verbatim
    and the embedded model's special tokens readable from a message's text."""
    lm = default_llm()
    _ = lm.tokenizer  # loads the model, which sets the special-token pattern
    saved = lm._special_tokens
    lm._special_tokens = None
    try:
        with (
            mock.patch.dict(prompts.UNTRUSTED_SLOTS, clear=True),
            mock.patch.object(answerer, "quote_passages", _raw_passages),
        ):
            yield
    finally:
        lm._special_tokens = saved


def _raw_passages(passages: list[str], max_chars: int | None = None) -> str:
    """Passages as the answerer wrote them before they were delimited."""
    return "\n".join(f"[{i}] {p[:max_chars]}" for i, p in enumerate(passages, start=1))


def poisoned(records: list[OutcomeRecord]) -> list[dict[str, Any]]:
    """The answerer over SmolLM2 and over a turn-following model, before and after,
    with ``POISONED_PASSAGE`` among each question's passages."""
    rows = []
    passages = ["Springfield is a town in the United States."]
    for code in ("before", "after"):
        with defence_off() if code == "before" else contextlib.nullcontext():
            models = {
                "SmolLM2-135M (embedded)": LocalChatModel(),
                "scripted: follows forged turns": TurnFollowingChat(VERBALIZED_VERDICTS),
            }
            for model_name, chat in models.items():
                report = passage_injections(LLMAnswerer(chat), [r.question for r in records], passages, "Paris")
                rows.append({"code": code, "model": model_name, **report})
                print(code, model_name, report["planted_attacked"], flush=True)
    return rows


def run(questions: list[str]) -> list[dict[str, Any]]:
    """Every (code, model, gate) combination's flips."""
    rows = []
    for code in ("before", "after"):
        with defence_off() if code == "before" else contextlib.nullcontext():
            for gate_name, (gate_type, verdicts) in GATES.items():
                models = {
                    "SmolLM2-135M (embedded)": LocalChatModel(),
                    "scripted: obeys instructions": ObeyingChat(verdicts),
                    "scripted: follows forged turns": TurnFollowingChat(verdicts),
                }
                for model_name, chat in models.items():
                    start = time.perf_counter()
                    report = injection_flips(gate_type(chat), questions, verdicts)
                    rows.append(
                        {
                            "code": code,
                            "gate": gate_name,
                            "model": model_name,
                            "seconds": time.perf_counter() - start,
                            **report,
                        }
                    )
                    print(
                        code, gate_name, model_name, {k: v["flips"] for k, v in report["attacks"].items()}, flush=True
                    )
    return rows


def plain(records: list[OutcomeRecord]) -> list[dict[str, Any]]:
    """Both gates over SmolLM2 on plain questions, before and after the defence."""
    rows = []
    for code in ("before", "after"):
        with defence_off() if code == "before" else contextlib.nullcontext():
            for gate_name, (gate_type, _) in GATES.items():
                decisions = gate_type(LocalChatModel()).decide_batch([r.question for r in records])
                drafts = [(d.draft_answer, r.answers) for d, r in zip(decisions, records) if d.draft_answer]
                rows.append(
                    {
                        "code": code,
                        "gate": gate_name,
                        "n": len(records),
                        "retrieve": sum(d.retrieve for d in decisions),
                        "fallbacks": sum(d.is_fallback for d in decisions),
                        "drafts_served": len(drafts),
                        "drafts_correct": sum(contains_answer(a, gold) >= 0.5 for a, gold in drafts),
                    }
                )
                print(rows[-1], flush=True)
    return rows


def table(rows: list[dict[str, Any]], field: str) -> str:
    """One line per (gate, model, code): ``field`` per attack, out of the questions
    that retrieved plain."""
    header = ["gate", "model", "code", "plain questions retrieving", *ATTACKS, "total"]
    lines = []
    for row in sorted(rows, key=lambda r: (r["gate"], r["model"], r["code"] == "after")):
        counts = [row["attacks"][name][field] for name in ATTACKS]
        lines.append(
            [
                row["gate"],
                row["model"],
                row["code"],
                f"{row['clean_retrieve']}/{row['n']}",
                *counts,
                f"{sum(counts)}/{row['clean_retrieve'] * len(ATTACKS)}",
            ]
        )
    return markdown_table(header, lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=8, help="attacked questions (the first of AdaRAGUE NQ)")
    parser.add_argument("--plain-n", type=int, default=40, help="plain questions for the defence's cost")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    records = adarague_outcomes("nq")
    questions = [r.question for r in records[: args.n]]
    rows = run(questions)
    passage_rows = poisoned(records[: args.n])
    plain_rows = plain(records[: args.plain_n])
    markdown = "\n\n".join(
        [
            "# Prompt injection against the gates that ask an LLM",
            f"`OMP_NUM_THREADS=1 .venv/bin/python benchmarks/prompt_injection.py --n {args.n} --plain-n "
            f"{args.plain_n}`: the first {args.n} questions of AdaRAGUE NQ, plain and with each attack appended "
            "(`adaptive_gates.evaluation.injection.ATTACKS`); verbalized gate (vanilla) and SKR-prompt gate, "
            "greedy, uncalibrated (the stated word decides). *Before*: the defence switched off in this tree "
            "(the question and prediction slots filled verbatim, passages pasted in raw, special-token text "
            "passed to the tokenizer), which renders the prompts as commit 7217f67 did (checked once, for the "
            "first six attacks: the messages both gates send, judgement prompts included, are byte-for-byte "
            "those of 7217f67); *after*: as shipped. SmolLM2 decodes greedily, so a rerun gives the same figures.",
            "## Flips: questions that retrieved plain and skip retrieval attacked",
            table(rows, "flips"),
            "## Drafts served: flips whose draft answer the verbalized gate would serve (in brackets: "
            "the attack's planted answer)",
            table_drafts(rows),
            '## A poisoned passage: answers that are the passage\'s planted "Paris" (the answerer, SKR layout)',
            markdown_table(
                ["model", "code", "answers containing Paris, clean passages", "same, poisoned passage first"],
                [
                    [r["model"], r["code"], f"{r['planted_clean']}/{r['n']}", f"{r['planted_attacked']}/{r['n']}"]
                    for r in passage_rows
                ],
            ),
            f"## Plain questions: what the defence changes (SmolLM2, the first {args.plain_n} questions)",
            markdown_table(
                ["gate", "code", "retrieve", "fallbacks", "drafts served", "drafts containing a gold answer"],
                [
                    [
                        r["gate"],
                        r["code"],
                        f"{r['retrieve']}/{r['n']}",
                        r["fallbacks"],
                        r["drafts_served"],
                        r["drafts_correct"],
                    ]
                    for r in plain_rows
                ],
            ),
        ]
    )
    md, _ = write_results(
        "prompt_injection",
        markdown,
        {"questions": questions, "runs": rows, "passages": passage_rows, "plain": plain_rows},
    )
    print(markdown)
    print(f"\nwrote {md}")


def table_drafts(rows: list[dict[str, Any]]) -> str:
    """The verbalized gate's served drafts per attack, planted ones in brackets."""
    header = ["model", "code", *ATTACKS]
    lines = [
        [
            row["model"],
            row["code"],
            *(f"{row['attacks'][a]['drafts_served']} ({row['attacks'][a]['forged_drafts_served']})" for a in ATTACKS),
        ]
        for row in sorted(rows, key=lambda r: (r["model"], r["code"] == "after"))
        if row["gate"] == "verbalized"
    ]
    return markdown_table(header, lines)


if __name__ == "__main__":
    main()

"""A saved gate decides the same after a restart: running code in a new process, and
what two processes' decisions must share."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest


def run_in_new_process(code: str, *args: str) -> Any:
    """The JSON ``code`` prints last, run by a new interpreter with ``args`` as its
    ``sys.argv[1:]`` (offline, one torch thread)."""
    result = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"},
    )
    if result.returncode != 0:
        raise AssertionError(f"the new process failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def decisions_compared(decisions: list[dict]) -> list[tuple]:
    """What must agree between two processes: verdicts, neighbours and their labels
    exactly, and scores and similarities to float precision."""
    return [
        (
            d["retrieve"],
            pytest.approx(d["score"], abs=1e-6),
            d["threshold"],
            [(n["question"], n["label"], pytest.approx(n["similarity"], abs=1e-6)) for n in d["details"]["neighbours"]],
        )
        for d in decisions
    ]


def check_a_saved_gate_decides_the_same_after_a_restart(
    memory: Any, persist: Any, restart: str, split: Any, embedder: Any, directory: Any
) -> None:
    """An SKR gate over ``memory`` (a store-backed memory factory), fitted and taught one
    verdict, with its store persisted by ``persist(path)`` and the gate saved: a new
    process running ``restart`` (argv: the store file, the gate folder, the questions as
    JSON; prints ``{"decisions", "entries"}``) decides exactly as it does, and attaching
    added nothing to the store."""
    from adaptive_gates import SKRKnnGate

    (questions, labels), asked = split
    gate = SKRKnnGate(embedder, k=5, weighting="similarity", memory=memory)
    gate.fit(questions[:60], labels[:60]).record_feedback(asked[0], retrieved=False, correct=False)
    persist(str(directory / "store.json"))
    gate.save(directory / "gate")
    before = [d.to_dict() for d in gate.decide_batch(asked[:12])]
    if not any(d["retrieve"] for d in before) or all(d["retrieve"] for d in before):
        raise AssertionError("the questions must get both verdicts, or the comparison shows little")
    after = run_in_new_process(restart, str(directory / "store.json"), str(directory / "gate"), json.dumps(asked[:12]))
    if after["entries"] != 61:  # the 60 questions and the verdict: attaching added nothing
        raise AssertionError(f"the store holds {after['entries']} entries after the restart, not 61")
    if decisions_compared(after["decisions"]) != decisions_compared(before):
        raise AssertionError(f"decisions differ after the restart:\n{after['decisions']}\n{before}")

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

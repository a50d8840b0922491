"""Example scripts run one after another in one interpreter, each as
``python examples/<script> <args>`` would run it (as ``__main__``, its folder first on the
path), its output to its own file: torch and the models load once instead of once per run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

_RUN_SCRIPTS = """
import contextlib, json, runpy, sys
folder, runs = sys.argv[1], json.loads(sys.argv[2])
sys.path.insert(0, folder)
for script, args, out in runs:
    sys.argv = [script, *args]
    with open(out, "w", encoding="utf-8") as f, contextlib.redirect_stdout(f):
        runpy.run_path(f"{folder}/{script}", run_name="__main__")
"""


def run_scripts(folder: Path, runs: list[tuple[str, list[str], Path]], env: dict[str, str] | None = None) -> list[str]:
    """What each ``(script, args, output file)`` printed, the scripts of ``folder`` run in
    order in one offline process on one torch thread (``env`` added to the environment).
    A script that fails fails the caller's test with the process's error output."""
    result = subprocess.run(
        [sys.executable, "-c", _RUN_SCRIPTS, str(folder), json.dumps([(s, a, str(o)) for s, a, o in runs])],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1", **(env or {})},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return [out.read_text(encoding="utf-8") for _, _, out in runs]

"""Child processes the tests and the release checks start, stopped the same way."""

from __future__ import annotations

import subprocess


def stop(process: subprocess.Popen, timeout: float = 30.0) -> None:
    """Stop ``process`` (SIGTERM, then SIGKILL if it lingers past ``timeout`` seconds)
    and wait for it."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()

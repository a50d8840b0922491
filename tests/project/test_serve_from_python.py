"""``docs/serve_from_python.md`` run as a user pastes it: the service built from typed
parameters (the shipped gate, the embedded SmolLM2), its app mounted in a FastAPI app
of the user's own and asked through HTTP, and the service asked without HTTP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.readme_blocks import readme_blocks, run_readme

pytestmark = pytest.mark.live_server  # a real app and model: left out of make test-fast

PAGE = Path(__file__).resolve().parents[2] / "docs" / "serve_from_python.md"


def test_the_page_opens_with_a_five_line_example():
    first = readme_blocks(PAGE)[0][1]
    assert len([line for line in first.splitlines() if line.strip()]) == 5


def test_the_pages_blocks_serve_from_python(capsys):
    namespace: dict = {}
    assert run_readme(PAGE, namespace) == 3
    printed = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(printed) if line.startswith('{"id":"dec-'))  # the decision header
    assert "".join(printed[:at]).strip()  # the mounted app answered
    decision = json.loads(printed[at])
    assert decision["gate"] == "draft-check" and decision["route"] in {"direct", "retrieve", "draft"}
    route, tokens, *_ = printed[at + 1].split(" ", 2)
    assert route in {"direct", "retrieve", "draft"} and int(tokens) > 0
    service = namespace["service"]
    assert service.stats()["stats"]["requests"] == 2  # both answers were recorded
    assert namespace["answer"].decision_id != decision["id"]

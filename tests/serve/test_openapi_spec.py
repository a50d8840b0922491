"""``adaptive-gates serve`` against its own OpenAPI spec: schemathesis sends requests
generated from the spec, valid and invalid, to the app with the embedded SmolLM2
answering, and checks every response against the spec (its status, content type,
body and headers), and that none is a 5xx.

The one check left out is that every request the schema allows is accepted: the server
also refuses, with a documented 400, what a JSON schema does not say (a conversation
must end with a user message that has text), so a valid chat request gets a user
question appended to whatever was generated before it, and is then answered.
"""

from __future__ import annotations

import shutil
from collections import Counter

import pytest
import schemathesis
from hypothesis import given, settings
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import positive_data_acceptance

from adaptive_gates import SKRKnnGate
from adaptive_gates.retrieval import DenseRetriever
from adaptive_gates.serve import ChatService
from adaptive_gates.serve.app import create_app
from adaptive_gates.serve.limits import Limits

pytestmark = pytest.mark.live_server  # a real app and model: left out of make test-fast

#: Answers of at most this many tokens: the spec says so, and the fuzzing stays quick.
MAX_ANSWER_TOKENS = 2
#: Passages per retrieved answer: one shows the record's passages in the spec's shape, and
#: each is read by the model before it answers (a prompt of three is three times as long).
PASSAGES = 1
#: Generated requests per operation and mode (valid, invalid); deterministic, so a run
#: repeats the last one.
EXAMPLES = 40
QUESTION = {"role": "user", "content": "Who wrote Hamlet?"}
CHAT = "POST /v1/chat/completions"


@pytest.fixture(scope="module")
def app(served_gate_dir, served_corpus, embedder, served_chat_model, tmp_path_factory):
    copy = shutil.copytree(served_gate_dir, tmp_path_factory.mktemp("openapi") / "gate")
    gate = SKRKnnGate.load(copy, embedder=embedder)
    retriever = DenseRetriever.from_jsonl(served_corpus, embedder)
    limits = Limits(max_answer_tokens=MAX_ANSWER_TOKENS)
    return create_app(ChatService(gate, retriever, served_chat_model, k=PASSAGES, max_tokens=1, limits=limits))


@pytest.fixture(scope="module")
def spec(app):
    return schemathesis.openapi.from_asgi("/openapi.json", app)


def answerable(case):
    """A valid chat request, with a user question appended, is one the server answers."""
    valid_chat = case.operation.label == CHAT and case.meta.generation.mode.is_positive
    if valid_chat and isinstance(case.body, dict) and isinstance(case.body.get("messages"), list):
        case.body["messages"] = [*case.body["messages"], QUESTION]
    return case


def test_every_response_matches_the_spec_and_none_is_a_server_error(spec):
    seen: Counter[tuple[str, bool, int]] = Counter()
    for result in spec.get_all_operations():
        operation = result.ok()
        # invalid requests where there are any: the JSON bodies (every other route takes
        # nothing, or a model name that may be any text)
        for mode in GenerationMode if operation.body else [GenerationMode.POSITIVE]:
            strategy = operation.as_strategy(generation_mode=mode).map(answerable)

            @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None)
            @given(case=strategy)
            def responds_as_documented(case):
                response = case.call_and_validate(excluded_checks=[positive_data_acceptance])
                seen[case.operation.label, case.meta.generation.mode.is_positive, response.status_code] += 1

            responds_as_documented()
    # valid chat requests reached past validation into the gate and the model; no
    # invalid one was answered
    assert seen[CHAT, True, 200] >= 5, seen
    assert not any(status < 400 for label, valid, status in seen if label == CHAT and not valid), seen

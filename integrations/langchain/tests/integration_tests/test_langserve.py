"""A gate runnable served by LangServe in a server process of its own: the schemas it
publishes are the runnable's, and ``/invoke`` validates each input form the gate reads,
answers with the decision, and refuses a value in no form, and a misspelt gate key, with
HTTP 422."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import pytest

from adaptive_gates.serve.health import wait_until_healthy
from langchain_adaptive_gates import GateRunnable
from support.milvus_server import free_port

from ..input_forms import NOT_INPUTS

APP = Path(__file__).resolve().parents[1] / "langserve_app.py"
KNOWN_Q = "Who wrote Macbeth?"
UNKNOWN_Q = "What was the population of Nauru in the 2021 census?"
#: The JSON forms of input a client sends (the Python-object forms have no JSON).
JSON_FORMS = {
    "string": UNKNOWN_Q,
    "json-messages": [{"type": "ai", "content": "Hello."}, {"type": "human", "content": UNKNOWN_Q}],
    "openai-dicts": [{"role": "user", "content": UNKNOWN_Q}],
    "pairs": [["human", UNKNOWN_Q]],
    "dict": {"question": UNKNOWN_Q, "chat_history": [{"role": "user", "content": "Hi"}]},
    "input-dict": {"input": UNKNOWN_Q},
}

pytestmark = pytest.mark.live_server


@pytest.fixture(scope="module")
def served(knn_gate, tmp_path_factory):
    """The fitted gate saved, and served from a new process by ``langserve_app.py``."""
    gate_dir = knn_gate.save(tmp_path_factory.mktemp("langserve") / "gate")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryFile() as output:  # a file, not a pipe nobody reads
        process = subprocess.Popen(
            [sys.executable, str(APP), str(gate_dir), str(port)], env=env, stdout=output, stderr=subprocess.STDOUT
        )
        try:
            wait_until_healthy(url, alive=lambda: process.poll() is None, timeout=600)
            yield url
        finally:
            process.terminate()
            process.wait(timeout=60)


def test_the_published_schemas_are_the_runnables(served, knn_gate):
    runnable = GateRunnable(knn_gate)
    assert httpx.get(f"{served}/gate/input_schema").json() == runnable.get_input_jsonschema()
    assert httpx.get(f"{served}/gate/output_schema").json() == runnable.get_output_jsonschema()
    config = httpx.get(f"{served}/gate/config_schema").json()
    # LangServe publishes the config schema of the runnable bound to the request's config
    # (LangChain's own, without the refusal of undeclared keys it validates requests with):
    # the keys are the runnable's.
    declared = runnable.get_config_jsonschema()["$defs"]["Configurable"]
    assert config["$defs"]["Configurable"]["properties"] == declared["properties"]
    assert {"gate_threshold", "gate_retrieval", "gate_name"} <= set(config["$defs"]["Configurable"]["properties"])


@pytest.mark.parametrize("form", list(JSON_FORMS))
def test_invoke_decides_every_json_form(served, knn_gate, form):
    response = httpx.post(f"{served}/gate/invoke", json={"input": JSON_FORMS[form]}, timeout=120)
    assert response.status_code == 200, response.text
    decision = response.json()["output"]
    expected = knn_gate.decide(UNKNOWN_Q)
    assert (decision["retrieve"], decision["score"], decision["error"]) == (expected.retrieve, expected.score, None)


def test_invoke_takes_the_requests_control(served):
    body = {"input": KNOWN_Q, "config": {"configurable": {"gate_retrieval": "always"}}}
    decision = httpx.post(f"{served}/gate/invoke", json=body, timeout=120).json()["output"]
    assert decision["retrieve"] is True and decision["details"] == {"forced": "always"}


def test_a_misspelt_gate_key_is_refused_with_422_naming_it(served):
    """LangServe keeps of a request's config what the served schema declares: the schema
    refuses a misspelt key instead of letting it vanish."""
    body = {"input": KNOWN_Q, "config": {"configurable": {"gate_treshold": 0.3}}}
    response = httpx.post(f"{served}/gate/invoke", json=body, timeout=120)
    assert response.status_code == 422, response.text
    assert "unknown configurable key 'gate_treshold'; did you mean 'gate_threshold'?" in response.text
    batch = {"inputs": [KNOWN_Q], "config": {"configurable": {"gate_retreival": "always"}}}
    response = httpx.post(f"{served}/gate/batch", json=batch, timeout=120)
    assert response.status_code == 422 and "did you mean 'gate_retrieval'?" in response.text


@pytest.mark.parametrize("name", ["number", "dict-without-question", "list-of-numbers", "unknown-message-type"])
def test_a_value_in_no_form_is_refused_with_422(served, name):
    response = httpx.post(f"{served}/gate/invoke", json={"input": NOT_INPUTS[name]}, timeout=120)
    assert response.status_code == 422, response.text

"""``adaptive-gates serve`` over real HTTP: an SKR-kNN gate fitted on real outcome
records, real Wikipedia passages in faiss, the embedded SmolLM2 answering (in process,
or behind the real OpenAI-compatible test server for the upstream's faults), and real
clients: the ``openai`` SDK, httpx and curl."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import shutil
import subprocess
import time

import httpx
import openai
import pytest

from adaptive_gates import LogprobGate, SKRKnnGate, VerbalizedGate
from adaptive_gates.answering.answerer import build_prompt
from adaptive_gates.models.chat.base import user
from adaptive_gates.models.chat.openai_chat import OpenAIChatModel
from adaptive_gates.models.embedded import SMOLLM2_ID as MODEL  # the name the served embedded model answers as
from adaptive_gates.retrieval import DenseRetriever
from adaptive_gates.serve import ChatService
from adaptive_gates.serve.app import create_app
from adaptive_gates.serve.readiness import REUSE_SECONDS
from support.milvus_server import free_port
from support.openai_server import Fault
from support.serve_process import ServedApp, ask

pytestmark = pytest.mark.live_server  # a real server: left out of make test-fast


@pytest.fixture(scope="module")
def retriever(served_corpus, embedder) -> DenseRetriever:
    return DenseRetriever.from_jsonl(served_corpus, embedder)


@pytest.fixture
def knn_gate(served_gate_dir, embedder, tmp_path) -> SKRKnnGate:
    """The served gate, loaded from a copy of its directory (feedback changes it)."""
    shutil.copytree(served_gate_dir, tmp_path / "gate")
    return SKRKnnGate.load(tmp_path / "gate", embedder=embedder)


@pytest.fixture(scope="module")
def routes(served_gate_dir, embedder, outcome_records) -> dict[str, str]:
    """A held-out question the gate answers directly and one it retrieves for."""
    gate = SKRKnnGate.load(served_gate_dir, embedder=embedder)
    found: dict[str, str] = {}
    for record in outcome_records[300:]:
        found.setdefault("retrieve" if gate.decide(record.question).retrieve else "direct", record.question)
        if len(found) == 2:
            return found
    raise AssertionError("the gate took one route for every held-out question")


@pytest.fixture
def served(knn_gate, retriever, served_chat_model):
    """The server in a thread, the embedded SmolLM2 answering."""
    service = ChatService(knn_gate, retriever, served_chat_model, max_tokens=8)
    with ServedApp(create_app(service)) as app:
        yield app


def test_a_completion_carries_its_decision_in_the_header_and_the_body(served, routes):
    client = openai.OpenAI(base_url=f"{served.url}/v1", api_key="none")
    for route, question in routes.items():
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=[{"role": "user", "content": question}], max_tokens=8
        )
        completion = raw.parse()
        header = json.loads(raw.headers["x-adaptive-gates-decision"])
        record = completion.model_extra["adaptive_gates"]
        assert completion.choices[0].message.content.strip()
        assert header["route"] == record["route"] == route
        assert header["id"] == record["id"] and completion.id.endswith(record["id"].removeprefix("dec-"))
        decision = record["decision"]
        assert decision["question"] == question and decision["retrieve"] == (route == "retrieve")
        assert header["score"] == decision["score"] and header["threshold"] == decision["threshold"]
        assert (decision["score"] >= decision["threshold"]) == decision["retrieve"]
        assert len(decision["details"]["neighbours"]) == 10  # the evidence: labelled past questions
        assert (len(record["passages"]) == 3) == (route == "retrieve")
        assert record["latency_ms"]["total"] >= record["latency_ms"]["upstream"] > 0


def test_usage_is_counted_in_the_models_tokens_and_streams_when_asked(served, routes, served_chat_model):
    client = openai.OpenAI(base_url=f"{served.url}/v1", api_key="none")
    for question in (routes["direct"], routes["retrieve"]):
        messages = [{"role": "user", "content": question}]
        whole = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8)
        usage = whole.usage
        # the prompt as the model read it: the question (with passages when retrieved) in its template
        assert usage.prompt_tokens > served_chat_model.count_tokens(question)
        assert 1 <= usage.completion_tokens <= 8 and usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
        stream = client.chat.completions.create(
            model=MODEL, messages=messages, max_tokens=8, stream=True, stream_options={"include_usage": True}
        )
        chunks = list(stream)
        assert chunks[-1].choices == [] and chunks[-1].usage == usage  # the same answer, the same cost
        assert all(c.usage is None for c in chunks[:-1])


def test_a_streamed_answer_is_the_same_answer_with_the_record_in_its_last_chunk(served, routes):
    client = openai.OpenAI(base_url=f"{served.url}/v1", api_key="none")
    messages = [{"role": "user", "content": routes["retrieve"]}]
    whole = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8)
    with client.chat.completions.with_streaming_response.create(
        model=MODEL, messages=messages, max_tokens=8, stream=True
    ) as response:
        header = json.loads(response.headers["x-adaptive-gates-decision"])
        chunks = list(response.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == whole.choices[0].message.content
    assert len(chunks) > 3  # token by token, not one piece
    last = chunks[-1]
    assert last.choices[0].finish_reason == whole.choices[0].finish_reason  # "length": cut at 8 tokens, as whole
    assert last.model_extra["adaptive_gates"]["id"] == header["id"]
    assert all("adaptive_gates" not in (c.model_extra or {}) for c in chunks[:-1])
    assert last.model_extra["adaptive_gates"]["route"] == "retrieve"


def test_curl_gets_the_stream_as_server_sent_events(served, routes):
    body = json.dumps({"messages": [{"role": "user", "content": routes["direct"]}], "stream": True, "max_tokens": 6})
    url = f"{served.url}/v1/chat/completions"
    out = subprocess.run(
        ["curl", "-sS", "-N", "-D", "-", url, "-H", "content-type: application/json", "-d", body],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    head, _, events = out.partition("\n\n")  # text mode reads the header's CRLFs as newlines
    assert "text/event-stream" in head and "x-adaptive-gates-decision:" in head.lower()
    data = [line.removeprefix("data: ") for line in events.splitlines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    assert json.loads(data[-2])["adaptive_gates"]["route"] == "direct"


def _judged(url: str, messages: list[dict]) -> dict:
    response = httpx.post(f"{url}/v1/chat/completions", json={"messages": messages, "max_tokens": 1}, timeout=120)
    return response.json()["adaptive_gates"]


def test_the_gate_judges_the_latest_question_made_standalone_never_the_transcript(served, knn_gate):
    conversation = [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "who plays gilbert blythe in anne with an e?"},
        {"role": "assistant", "content": "Lucas Jade Zumann."},
        {"role": "user", "content": "Who directed A Midsummer Night's Dream in 1935?"},
        {"role": "assistant", "content": "Max Reinhardt."},
    ]
    # a question that stands alone is judged alone, whatever came before
    alone = _judged(served.url, [*conversation, {"role": "user", "content": "What is the capital of France?"}])
    assert alone["decision"]["question"] == "What is the capital of France?"
    # a follow-up, after the user's question it leans on: no reply, no system prompt
    follow_up = _judged(served.url, [*conversation, {"role": "user", "content": "When was he born?"}])
    assert follow_up["decision"]["question"] == "Who directed A Midsummer Night's Dream in 1935? When was he born?"
    # what feedback stores in the memory is that question, never the conversation
    feedback = httpx.post(f"{served.url}/v1/feedback", json={"decision_id": follow_up["id"], "correct": False})
    assert feedback.status_code == 200
    assert knn_gate.feedback_.entries()[-1].question == follow_up["decision"]["question"]


def test_feedback_teaches_the_gate_and_the_next_answer_shows_it(served, routes):
    question = routes["direct"]
    memory = httpx.get(f"{served.url}/v1/stats").json()["memory"]
    # one token: what feedback teaches is checked, not the answers
    first = ask(served.url, question, max_tokens=1).json()["adaptive_gates"]
    taught = httpx.post(f"{served.url}/v1/feedback", json={"decision_id": first["id"], "correct": False}).json()
    assert taught["label"] == "unknown" and taught["route"] == "direct"
    assert taught["memory"] == {"known": memory["known"], "unknown": memory["unknown"] + 1}
    assert httpx.get(f"{served.url}/v1/stats").json()["stats"]["requests"] == 1
    again = ask(served.url, question, max_tokens=1).json()["adaptive_gates"]["decision"]
    nearest = again["details"]["neighbours"][0]
    assert nearest["question"] == question and nearest["label"] == "unknown"
    assert again["details"]["n_known"] <= first["decision"]["details"]["n_known"]
    # a retrieved answer teaches nothing the rule can label: only logged
    retrieved = ask(served.url, routes["retrieve"], max_tokens=1).json()["adaptive_gates"]
    logged = httpx.post(f"{served.url}/v1/feedback", json={"decision_id": retrieved["id"], "correct": True}).json()
    assert logged["label"] is None and logged["memory"] == taught["memory"]


def test_feedback_errors_take_openai_s_shape(served):
    unknown = httpx.post(f"{served.url}/v1/feedback", json={"decision_id": "dec-nope", "correct": True})
    assert unknown.status_code == 404 and unknown.json()["error"]["param"] == "decision_id"
    malformed = httpx.post(f"{served.url}/v1/feedback", json={"decision_id": "x", "correct": "yes please"})
    assert malformed.status_code == 400 and malformed.json()["error"]["type"] == "invalid_request_error"


#: A tool as OpenAI's clients declare one.
TOOL = {"type": "function", "function": {"name": "weather", "parameters": {"type": "object", "properties": {}}}}


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "assistant", "content": "hi"}]}, "last message must be the user's"),
        ({"messages": [{"role": "user", "content": "   "}]}, "empty"),
        ({"messages": [{"role": "user", "content": "\u200b\u2060"}]}, "must hold a visible character"),
        ({"messages": [{"role": "user", "content": "hi"}], "n": 2}, "n=1"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}, "image_url"),
        ({"messages": [{"role": "user", "content": "hi"}], "temperature": -1}, "temperature"),
        ({"messages": "hi"}, "messages"),
        # what the server cannot honour is refused, naming the field, not silently ignored
        ({"messages": [{"role": "user", "content": "hi"}], "tools": [TOOL]}, "cannot honour 'tools'"),
        ({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "required"}, "cannot honour 'tool_choice'"),
        (
            {"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_object"}},
            "cannot honour 'response_format'",
        ),
        ({"messages": [{"role": "user", "content": "hi"}], "logprobs": True}, "cannot honour 'logprobs'"),
    ],
)
def test_a_malformed_request_gets_a_400_in_openai_s_shape(served, body, says):
    response = httpx.post(f"{served.url}/v1/chat/completions", json=body, timeout=30)
    assert response.status_code == 400
    error = response.json()["error"]
    assert says in error["message"] and error["type"] == "invalid_request_error"
    with pytest.raises(openai.BadRequestError):  # what an OpenAI client sees
        openai.OpenAI(base_url=f"{served.url}/v1", api_key="none", max_retries=0).chat.completions.create(
            model=MODEL, **{"messages": [], **body}
        )


def test_a_lone_surrogate_in_a_message_gets_a_400_naming_it(served):
    # JSON may escape half a surrogate pair (curl sends what it is given); no model reads it
    body = rb'{"messages": [{"role": "user", "content": "Who is \ud800?"}]}'
    headers = {"content-type": "application/json"}
    response = httpx.post(f"{served.url}/v1/chat/completions", content=body, headers=headers, timeout=30)
    assert response.status_code == 400
    error = response.json()["error"]
    assert "message 0 cannot be encoded as UTF-8: surrogates not allowed" in error["message"]
    assert error["param"] == "messages"


def test_a_body_that_is_not_json_gets_a_400(served):
    response = httpx.post(
        f"{served.url}/v1/chat/completions",
        content=b"{not json",
        headers={"content-type": "application/json"},
        timeout=30,
    )
    assert response.status_code == 400 and "not valid JSON" in response.json()["error"]["message"]


def test_metrics_count_every_decision_by_route(served, routes):
    for question in (routes["direct"], routes["retrieve"], routes["retrieve"]):
        ask(served.url, question, max_tokens=1)  # counted, not read
    text = httpx.get(f"{served.url}/metrics").text
    values = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines() if line and line[0] != "#"}
    assert values['adaptive_gates_decisions_total{route="direct"}'] == 1
    assert values['adaptive_gates_decisions_total{route="retrieve"}'] == 2
    assert values["adaptive_gates_retrieval_rate"] == pytest.approx(2 / 3)
    assert values["adaptive_gates_gate_latency_seconds_count"] == 3
    assert values['adaptive_gates_request_latency_seconds_count{stream="false"}'] == 3
    assert values["adaptive_gates_fallbacks_total"] == 0
    assert httpx.get(f"{served.url}/healthz").json()["status"] == "ok"


# ----------------------------------------------------------------- the upstream behind HTTP


def _served_through(gate, retriever, server, timeout: float) -> ServedApp:
    """The server answering through the real OpenAI-compatible test server ``server``,
    waiting ``timeout`` seconds for it."""
    upstream = OpenAIChatModel(server.model_id, base_url=server.base_url, timeout=timeout, max_retries=0)
    return ServedApp(create_app(ChatService(gate, retriever, upstream, max_tokens=8, upstream_timeout=timeout)))


@pytest.fixture(scope="module")
def upstream_timeout(served_chat_model, routes) -> float:
    """How long the server waits for a hung upstream: ten times a one-token direct answer
    on this machine now, and at least 3 s, so the answer after a fault is slower on a
    loaded machine, not red."""
    start = time.perf_counter()
    served_chat_model.chat(user(routes["direct"]), max_tokens=1)
    return max(3.0, 10 * (time.perf_counter() - start))


@pytest.fixture
def behind_http(knn_gate, retriever, openai_server, upstream_timeout):
    """The server through the test server, for its faults: a hung upstream ends in ``upstream_timeout``."""
    with _served_through(knn_gate, retriever, openai_server, upstream_timeout) as app:
        yield app, openai_server


def test_an_upstream_streams_through_the_server(knn_gate, retriever, openai_server, routes):
    # The wait is derived from what this machine takes now for the same answer, as
    # the upstream gives it: ten times that is slower on a loaded machine, not red.
    passages = [hit.as_passage() for hit in retriever.search(routes["retrieve"], k=3)]
    start = time.perf_counter()
    openai_server.chat_model.chat(user(build_prompt(routes["retrieve"], passages)), max_tokens=8)
    timeout = 10 * (time.perf_counter() - start)
    with _served_through(knn_gate, retriever, openai_server, timeout) as served:
        client = openai.OpenAI(base_url=f"{served.url}/v1", api_key="none")
        messages = [{"role": "user", "content": routes["retrieve"]}]
        pieces = list(
            client.chat.completions.create(model=openai_server.model_id, messages=messages, max_tokens=8, stream=True)
        )
        whole = client.chat.completions.create(model=openai_server.model_id, messages=messages, max_tokens=8)
    assert "".join(p.choices[0].delta.content or "" for p in pieces) == whole.choices[0].message.content
    assert openai_server.requests == 2


def test_a_remote_upstreams_own_usage_is_reported_streamed_or_not(knn_gate, retriever, openai_server, routes):
    # what the upstream itself reports for the prompt the server will send it
    sent = [{"role": "user", "content": build_prompt(routes["direct"], [])}]
    upstream = openai.OpenAI(base_url=openai_server.base_url, api_key="none")
    start = time.perf_counter()
    direct = upstream.chat.completions.create(model=openai_server.model_id, messages=sent, max_tokens=8)
    timeout = 10 * (time.perf_counter() - start)
    messages = [{"role": "user", "content": routes["direct"]}]
    with _served_through(knn_gate, retriever, openai_server, timeout) as served:
        client = openai.OpenAI(base_url=f"{served.url}/v1", api_key="none")
        whole = client.chat.completions.create(model=openai_server.model_id, messages=messages, max_tokens=8)
        options = {"stream": True, "stream_options": {"include_usage": True}}
        chunks = list(
            client.chat.completions.create(model=openai_server.model_id, messages=messages, max_tokens=8, **options)
        )
    # the upstream's own count (streamed too: the server asks for it with include_usage),
    # not the server's estimate of 3 bytes a token
    assert whole.usage == direct.usage and chunks[-1].usage == direct.usage
    assert direct.usage.prompt_tokens != math.ceil(len(sent[0]["content"].encode()) / 3)


def test_the_first_token_reaches_the_client_while_the_upstream_holds_the_rest(
    knn_gate, retriever, openai_server, routes
):
    # The upstream sends its first piece and holds the rest until the test releases it:
    # a server that waited for more before sending the first piece would send nothing.
    with _served_through(knn_gate, retriever, openai_server, timeout=30) as served:
        for route, question in routes.items():
            openai_server.set_fault(Fault.HOLD_AFTER_FIRST_PIECE)
            body = {"messages": [{"role": "user", "content": question}], "max_tokens": 8, "stream": True}
            url = f"{served.url}/v1/chat/completions"
            with httpx.stream("POST", url, json=body, timeout=120) as response:
                events = (json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {"))
                first = next((e for e in events if "error" in e or e["choices"][0]["delta"].get("content")), None)
                assert first is not None and "error" not in first, f"no token came ({response.status_code}): {first}"
                assert openai_server.holding  # the rest is still in the upstream
                openai_server.release()
                rest = list(events)
                decision = json.loads(response.headers["x-adaptive-gates-decision"])
            assert decision["route"] == route
            pieces = [e["choices"][0]["delta"].get("content") for e in rest if e.get("choices")]
            assert [p for p in pieces if p]  # the rest followed once released
            assert rest[-1]["adaptive_gates"]["route"] == route and rest[-1]["choices"][0]["finish_reason"]


@pytest.mark.parametrize(("fault", "status"), [(Fault.ERROR_500, 502), (Fault.HANG, 504), (Fault.MALFORMED_JSON, 502)])
@pytest.mark.parametrize("stream", [False, True])
def test_a_failing_upstream_gets_a_bounded_clear_error_and_the_server_goes_on(
    behind_http, routes, fault, status, stream
):
    served, upstream = behind_http
    upstream.set_fault(fault)
    response = ask(served.url, routes["direct"], stream=stream)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["type"] == "upstream_error" and f"the upstream LLM {upstream.model_id!r}" in error["message"]
    assert upstream.base_url.removesuffix("/v1") not in response.text
    upstream.reset()
    assert ask(served.url, routes["direct"], max_tokens=1).status_code == 200


@pytest.mark.parametrize("stream", [False, True])
def test_an_unreachable_upstream_is_a_502_that_keeps_its_address_to_the_log(
    knn_gate, retriever, routes, stream, caplog
):
    address = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    upstream = OpenAIChatModel("remote-model", base_url=f"{address}/v1", timeout=30, max_retries=0)
    service = ChatService(knn_gate, retriever, upstream, max_tokens=4)
    with ServedApp(create_app(service)) as served, caplog.at_level(logging.WARNING, "adaptive_gates.serve"):
        response = ask(served.url, routes["direct"], stream=stream)
    assert response.status_code == 502 and address not in response.text and "127.0.0.1" not in response.text
    assert response.json()["error"]["message"] == "the upstream LLM 'remote-model' failed; the server's log says why"
    assert any(address in r.getMessage() for r in caplog.records if r.name == "adaptive_gates.serve.service")


def test_a_hung_upstream_does_not_hold_up_other_requests(behind_http, routes):
    served, upstream = behind_http
    upstream.set_fault(Fault.HANG)

    async def main() -> list[str]:
        order: list[str] = []
        async with httpx.AsyncClient(base_url=served.url, timeout=60) as client:

            async def hung() -> None:
                body = {"messages": [{"role": "user", "content": routes["direct"]}], "max_tokens": 4}
                response = await client.post("/v1/chat/completions", json=body)
                order.append(f"hung {response.status_code}")

            async def others() -> None:
                await asyncio.sleep(0.3)
                for _ in range(5):
                    assert (await client.get("/v1/stats")).status_code == 200
                order.append("others")

            await asyncio.gather(hung(), others())
        return order

    assert asyncio.run(main()) == ["others", "hung 504"]


def test_a_confident_draft_is_served_without_a_second_call(retriever, openai_server):
    upstream = OpenAIChatModel(openai_server.model_id, base_url=openai_server.base_url)
    gate = VerbalizedGate(upstream, unparseable="first-token")
    service = ChatService(gate, retriever, upstream, max_tokens=8)
    with ServedApp(create_app(service)) as served:
        # the 135M model states no certainty for most questions; for this one it does
        record = ask(served.url, "What color is the sky?").json()["adaptive_gates"]
        answer = record["decision"]["draft_answer"]
        assert record["route"] == "draft" and record["decision"]["details"]["certainty"] == "certain"
        assert openai_server.requests == record["decision"]["llm_calls"]  # the gate's own, no answer call
        stats = httpx.get(f"{served.url}/v1/stats").json()["stats"]
        assert stats["llm_calls_saved"] == 1 and stats["retrieval_calls_saved"] == 1
        streamed = ask(served.url, "What color is the sky?", stream=True).text
        assert json.dumps(answer)[1:-1] in streamed


def test_a_gate_whose_backend_cannot_serve_it_gets_a_502(retriever, openai_server):
    upstream = OpenAIChatModel(openai_server.model_id, base_url=openai_server.base_url)
    openai_server.set_fault(Fault.NO_LOGPROBS)  # a server that gives no log-probs to a gate that reads them
    service = ChatService(LogprobGate(upstream), retriever, upstream, max_tokens=8)
    with ServedApp(create_app(service)) as served:
        response = ask(served.url, "Who wrote Hamlet?")
        assert response.status_code == 502
        assert "log-prob" in response.json()["error"]["message"]
        openai_server.reset()
        assert ask(served.url, "Who wrote Hamlet?", max_tokens=1).status_code == 200


def test_ready_names_what_it_cannot_reach_and_the_log_never_holds_a_question(knn_gate, retriever, caplog):
    dead = OpenAIChatModel("any", base_url=f"http://127.0.0.1:{free_port()}/v1", max_retries=0)
    # the whole server's life: a request's line is written once its response is sent
    logged = caplog.at_level(logging.INFO, logger="adaptive_gates.serve.access")
    with logged, ServedApp(create_app(ChatService(knn_gate, retriever, dead))) as app:
        alive = httpx.get(f"{app.url}/healthz")
        ready = httpx.get(f"{app.url}/readyz")
        httpx.post(f"{app.url}/v1/chat/completions", json={"messages": [{"role": "user", "content": "Who is Ada?"}]})
    assert alive.status_code == 200  # alive, but not ready
    assert ready.status_code == 503 and ready.json() == {
        "status": "not ready",
        "checks": {"upstream": "unreachable (ConnectError)", "corpus": "ok", "memory": "ok"},
    }
    lines = [r.getMessage() for r in caplog.records if r.name == "adaptive_gates.serve.access"]
    assert any('"GET /readyz" 503' in line for line in lines)
    assert any('"POST /v1/chat/completions" 502' in line for line in lines)
    assert "Ada" not in caplog.text


def test_ready_when_every_dependency_answers(served):
    ready = httpx.get(f"{served.url}/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready", "checks": {"upstream": "ok", "corpus": "ok", "memory": "ok"}}


def test_any_model_name_is_an_alias_of_the_served_model(served, knn_gate):
    client = openai.OpenAI(base_url=f"{served.url}/v1", api_key="none", max_retries=0)
    listed = client.models.list().data
    assert [m.id for m in listed] == [MODEL, "default"]
    # what the page reads to offer the thumbs: the gate, and that it learns from feedback
    assert all(
        m.model_extra["adaptive_gates"] == {"model": MODEL, "gate": "skr-knn", "learns_from_feedback": True}
        for m in listed
    )
    for name in ("default", "gpt-4o", MODEL):
        assert client.models.retrieve(name).id == name
        completion = client.chat.completions.create(
            model=name, messages=[{"role": "user", "content": "Hi"}], max_tokens=1
        )
        assert completion.model == MODEL  # answered by the served model, whatever the name asked


def test_a_gate_that_cannot_learn_says_so_in_the_models_list(retriever, served_chat_model):
    service = ChatService(VerbalizedGate(served_chat_model), retriever, served_chat_model, max_tokens=1)
    with ServedApp(create_app(service)) as app:
        (model, default) = httpx.get(f"{app.url}/v1/models").json()["data"]
    assert model["adaptive_gates"]["learns_from_feedback"] is default["adaptive_gates"]["learns_from_feedback"] is False


def test_the_published_spec_documents_the_statuses_the_server_answers_with(served):
    spec = httpx.get(f"{served.url}/openapi.json").json()
    chat = spec["paths"]["/v1/chat/completions"]["post"]["responses"]
    assert "422" not in chat and {"400", "401", "413", "429", "502", "503", "504"} <= set(chat)
    assert set(spec["paths"]["/v1/feedback"]["post"]["responses"]) >= {"400", "404", "409", "429"}
    assert "503" in spec["paths"]["/readyz"]["get"]["responses"]
    assert list(spec["paths"]["/metrics"]["get"]["responses"]["200"]["content"]) == ["text/plain"]
    # what the server answers is what the spec says: a body it cannot read is a 400 in the error shape
    refused = httpx.post(f"{served.url}/v1/chat/completions", json={"messages": []})
    error_schema = chat[str(refused.status_code)]["content"]["application/json"]["schema"]
    assert refused.status_code == 400 and set(error_schema["required"]) <= set(refused.json())


def test_a_flood_of_readiness_checks_reaches_the_upstream_once_a_moment(knn_gate, retriever, openai_server):
    upstream = OpenAIChatModel(openai_server.model_id, base_url=openai_server.base_url, max_retries=0)
    with ServedApp(create_app(ChatService(knn_gate, retriever, upstream))) as app:

        async def flood() -> list[int]:
            async with httpx.AsyncClient() as client:
                replies = await asyncio.gather(*(client.get(f"{app.url}/readyz") for _ in range(40)))
            return [r.status_code for r in replies]

        started = time.monotonic()
        assert asyncio.run(flood()) == [200] * 40
        # one check a moment, however many ask (one for all forty, unless the machine
        # took longer than a moment to serve them)
        checks = openai_server.model_lists
        assert 1 <= checks <= 1 + (time.monotonic() - started) // REUSE_SECONDS, checks
        time.sleep(REUSE_SECONDS)
        assert httpx.get(f"{app.url}/readyz").status_code == 200 and openai_server.model_lists == checks + 1

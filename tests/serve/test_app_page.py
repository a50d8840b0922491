"""The chat page of ``adaptive-gates serve`` in a real browser, against a real server.

The server is what ``adaptive-gates serve`` builds from its command line, over an SKR-kNN
gate fitted on real outcome records, a corpus of real Wikipedia paragraphs and the
embedded SmolLM2, served over real HTTP from this process (the tests are about the page;
``tests/cli/test_serve.py`` runs the command as a process of its own); Debian's chromium
drives the page as a user would. The gate decides, not the
135M model, so the questions are chosen by what the fitted gate does with them.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import httpx
import pytest

from adaptive_gates import SKRKnnGate, VerbalizedGate, load_gate
from adaptive_gates.models import LocalChatModel
from adaptive_gates.records.data import iter_jsonl
from support.milvus_server import free_port
from support.serve_process import ServedApp, command_in_process

pytestmark = pytest.mark.live_server  # a real server: left out of make test-fast

#: Passages per retrieval.
PASSAGES = 2
#: Enough tokens to see an answer stream, few enough to keep the test fast.
MAX_TOKENS = 12
#: Enough tokens to finish an answer whose text is not what a test checks.
FEW_TOKENS = 1
#: Where the screenshot of a conversation goes when it is wanted (``make page-screenshot``
#: writes the serve page's, docs/serve-page.png); otherwise the test's own folder, so a
#: test run leaves the tree as it was.
SCREENSHOT_ENV = "ADAPTIVE_GATES_PAGE_SCREENSHOT"


class Served(NamedTuple):
    """A running server, the gate it started from, and questions chosen for that gate."""

    url: str
    gate: SKRKnnGate
    #: A question the gate has not seen whose k nearest past questions are all known:
    #: sent direct with score 0, so any unknown verdict on it raises its score.
    direct: str
    #: A question the gate has not seen and sends to retrieval.
    retrieve: str
    titles: frozenset[str]


@pytest.fixture(scope="module")
def served(served_gate_dir, served_corpus, outcome_records, embedder, tmp_path_factory) -> Iterator[Served]:
    """What ``adaptive-gates serve`` builds over a copy of the served gate (feedback is
    saved to it), served from this process."""
    gate_dir = shutil.copytree(served_gate_dir, tmp_path_factory.mktemp("page") / "gate")
    gate = load_gate(gate_dir, embedder=embedder)
    # the first 300 records are the gate's own (served_gate_dir): each is its own nearest neighbour, never unseen
    decisions = gate.decide_batch([r.question for r in outcome_records[300:]])
    unseen = [d for d in decisions if all(n["similarity"] < 0.99 for n in d.details["neighbours"])]
    direct = next(d.question for d in unseen if d.score == 0.0)
    retrieve = next(d.question for d in unseen if d.retrieve)
    titles = frozenset(obj["title"] for _, obj in iter_jsonl(served_corpus))
    with command_in_process("--gate", gate_dir, "--corpus", served_corpus, "--k", str(PASSAGES)) as server:
        yield Served(server.url, gate, direct, retrieve, titles)


#: Records, at every change of the page, the state, text and route of the last answer.
WATCH_LAST_ANSWER = """() => {
  window.seen = [];
  new MutationObserver(() => {
    const answers = document.querySelectorAll('[data-testid="answer"]');
    const last = answers[answers.length - 1];
    if (!last) return;
    window.seen.push({
      state: last.dataset.state,
      text: last.querySelector('[data-testid="answer-text"]').textContent,
      route: last.querySelector('[data-testid="route"]').textContent,
    });
  }).observe(document.body, {subtree: true, childList: true, characterData: true, attributes: true});
}"""


def _ask(page, question: str):
    """Type ``question``, send it with Enter, and wait for its answer to finish."""
    count = page.get_by_test_id("answer").count()
    page.get_by_test_id("question").fill(question)
    page.get_by_test_id("question").press("Enter")
    answer = page.get_by_test_id("answer").nth(count)
    answer.and_(page.locator('[data-state="done"]')).wait_for(timeout=120_000)
    return answer


def _neighbours(answer) -> list[tuple[str, str, float]]:
    """The evidence rows of ``answer``: past question, label, similarity."""
    rows = []
    for row in answer.get_by_test_id("neighbour").all():
        question = row.get_by_test_id("neighbour-question").inner_text()
        similarity = float(row.get_by_test_id("neighbour-similarity").inner_text())
        rows.append((question, row.get_attribute("data-label"), similarity))
    return rows


def _thumbs_disabled(answer) -> bool:
    return answer.get_by_test_id("feedback-up").is_disabled() and answer.get_by_test_id("feedback-down").is_disabled()


def _memory(page) -> tuple[int, int]:
    """The gate's memory as the header shows it: known and unknown questions."""
    known, unknown = re.fullmatch(r"(\d+) known · (\d+) unknown", _stat(page, "memory")).groups()
    return int(known), int(unknown)


def _stat(page, name: str) -> str:
    return page.get_by_test_id(name).inner_text()


def test_an_answer_streams_with_its_decision_and_a_thumbs_down_teaches_the_gate(served, browser_page, tmp_path):
    page = browser_page
    page.goto(served.url)
    threshold = f"{served.gate.threshold_:.3f}"
    page.get_by_test_id("gate-name").filter(has_text=threshold).wait_for()
    assert _stat(page, "requests") == "0"
    page.get_by_test_id("max-tokens").fill(str(MAX_TOKENS))
    page.evaluate(WATCH_LAST_ANSWER)

    first = _ask(page, served.direct)

    seen = page.evaluate("window.seen")
    streamed = [s for s in seen if s["state"] == "streaming" and s["text"]]
    assert len({s["text"] for s in streamed}) >= 2, f"the answer did not grow token by token: {seen}"
    assert streamed[0]["route"] == "direct", f"the decision was not shown before the first token: {streamed[0]}"
    text = first.get_by_test_id("answer-text").text_content() or ""
    assert text.strip() and text.startswith(streamed[0]["text"])

    assert first.get_by_test_id("route").inner_text() == "direct"
    assert first.get_by_test_id("score").inner_text() == "0.000"
    assert first.get_by_test_id("threshold").inner_text() == threshold
    before = _neighbours(first)
    assert len(before) == served.gate.k and {label for _, label, _ in before} == {"known"}
    assert all(question != served.direct for question, _, _ in before)
    assert "none: answered without retrieval" in first.get_by_test_id("passages").inner_text()
    latency = first.get_by_test_id("latency").inner_text()
    assert all(part in latency for part in ("gate", "retrieval", "upstream", "total"))
    assert (_stat(page, "requests"), _stat(page, "retrieval-rate")) == ("1", "0.0%")
    assert (_stat(page, "calls-saved"), _stat(page, "llm-calls-saved")) == ("1", "0")

    memory_before = _memory(page)
    first.get_by_test_id("feedback-down").click()
    status = first.get_by_test_id("feedback-status")
    status.and_(page.locator("[data-label]")).wait_for()
    assert status.get_attribute("data-label") == "unknown"
    assert "the gate learned: unknown" in status.inner_text()
    assert _thumbs_disabled(first)
    assert _memory(page) == (memory_before[0], memory_before[1] + 1)

    # A new conversation judges the question alone, which the gate now remembers as unknown.
    page.get_by_test_id("new-chat").click()
    page.get_by_test_id("new-conversation").wait_for()
    again = _ask(page, served.direct)
    assert again.get_by_test_id("judged").inner_text() == f"judged: {served.direct}"
    after = _neighbours(again)
    itself = [(label, similarity) for question, label, similarity in after if question == served.direct]
    assert itself and itself[0][0] == "unknown" and itself[0][1] > 0.99, after
    assert float(again.get_by_test_id("score").inner_text()) > 0.0
    assert _stat(page, "requests") == "2"
    # The whole conversation in one window, so the header and composer stay in place.
    page.set_viewport_size({"width": 1280, "height": page.evaluate("document.documentElement.scrollHeight")})
    screenshot = Path(os.environ.get(SCREENSHOT_ENV) or tmp_path / "serve-page.png")
    page.screenshot(path=screenshot)
    assert screenshot.read_bytes()[:4] == b"\x89PNG"


def test_a_retrieved_answer_shows_its_passages_and_a_follow_up_carries_the_conversation(served, browser_page):
    page = browser_page
    page.goto(served.url)
    page.get_by_test_id("gate-name").filter(has_text="skr-knn").wait_for()
    page.get_by_test_id("max-tokens").fill(str(MAX_TOKENS))

    answer = _ask(page, served.retrieve)
    assert answer.get_by_test_id("route").inner_text() == "retrieve"
    assert float(answer.get_by_test_id("score").inner_text()) > served.gate.threshold_
    passages = answer.get_by_test_id("passage")
    assert passages.count() == PASSAGES
    assert {p.locator("summary strong").inner_text() for p in passages.all()} <= served.titles
    assert answer.get_by_test_id("judged").inner_text() == f"judged: {served.retrieve}"

    follow_up = _ask(page, "And why?")
    # the gate judges the follow-up made standalone by the questions before it, not their answers
    judged = follow_up.get_by_test_id("judged").inner_text()
    assert judged == f"judged: {served.retrieve} And why?", judged

    answer.get_by_test_id("feedback-up").click()
    status = answer.get_by_test_id("feedback-status")
    status.and_(page.locator("[data-label]")).wait_for()
    assert status.get_attribute("data-label") == "none"
    assert "logged" in status.inner_text()

    # A new page load shows the server's running stats.
    page.reload()
    page.get_by_test_id("gate-name").filter(has_text="skr-knn").wait_for()
    stats = httpx.get(f"{served.url}/v1/stats").json()["stats"]
    assert stats["requests"] >= 2 and stats["retrieved"] >= 1
    page.get_by_test_id("requests").filter(has_text=str(stats["requests"])).wait_for()
    assert _stat(page, "retrieval-rate") == f"{100 * stats['retrieval_rate']:.1f}%"
    assert _stat(page, "calls-saved") == str(stats["retrieval_calls_saved"])


def test_an_upstream_failure_shows_the_servers_error_and_the_page_keeps_working(
    served_gate_dir, served_corpus, browser_page
):
    page = browser_page
    nothing_listens = f"http://127.0.0.1:{free_port()}/v1"
    upstream = ["--upstream-base-url", nothing_listens, "--upstream-model", "absent", "--upstream-timeout", "5"]
    with command_in_process("--gate", served_gate_dir, "--corpus", served_corpus, "--no-save", *upstream) as server:
        page.goto(server.url)
        page.get_by_test_id("gate-name").filter(has_text="skr-knn").wait_for()
        question = "who wrote <b>moby dick</b>?"
        page.get_by_test_id("question").fill(question)
        page.get_by_test_id("send").click()
        answer = page.get_by_test_id("answer").and_(page.locator('[data-state="error"]'))
        answer.wait_for(timeout=60_000)
        error = answer.get_by_test_id("answer-error").inner_text()
        # the message of the OpenAI-shaped error body, not the body itself
        assert error.startswith("HTTP 502: ") and "upstream" in error and "{" not in error, error
        assert answer.get_by_test_id("decision").is_hidden() and answer.get_by_test_id("feedback-down").is_hidden()
        assert page.get_by_test_id("send").is_enabled() and page.get_by_test_id("question").input_value() == ""
        # what the user typed is shown as text, never as markup
        assert page.get_by_test_id("user-turn").inner_text() == question
        assert page.locator("[data-testid=conversation] b").count() == 0


def test_a_verbalized_gate_shows_its_draft_certainty_and_fallbacks_and_offers_no_feedback(
    outcome_records, served_corpus, browser_page, tmp_path, one_torch_thread
):
    # Here the embedded model decides (it states its certainty, or fails to), so the
    # test asks it first, as the server will: greedy replies of the same model repeat.
    gate = VerbalizedGate(LocalChatModel())
    drafted = fallback = None
    for record in outcome_records[:8]:
        decision = gate.decide(record.question)
        if decision.draft_answer and not decision.retrieve:
            drafted = drafted or decision
        if decision.is_fallback:
            fallback = fallback or decision
        if drafted and fallback:
            break
    assert drafted and fallback, f"among the first 8 questions: drafted {drafted}, fallback {fallback}"
    page = browser_page
    verbalized = gate.save(tmp_path / "verbalized")
    with command_in_process("--gate", verbalized, "--corpus", served_corpus, "--no-save") as server:
        page.goto(server.url)
        page.get_by_test_id("gate-name").filter(has_text="verbalized").wait_for()
        page.get_by_test_id("max-tokens").fill(str(MAX_TOKENS))
        answer = _ask(page, drafted.question)
        assert answer.get_by_test_id("route").inner_text() == "draft"
        assert answer.get_by_test_id("certainty").inner_text() == "stated certainty: certain"
        assert answer.get_by_test_id("answer-text").inner_text().strip() == drafted.draft_answer.strip()
        assert answer.get_by_test_id("fallback").is_hidden()
        assert (_stat(page, "requests"), _stat(page, "llm-calls-saved")) == ("1", "1")

        # the verbalized gate learns nothing from a verdict: the page offers no thumbs to give one
        assert answer.get_by_test_id("feedback-up").is_hidden() and answer.get_by_test_id("feedback-down").is_hidden()

        page.get_by_test_id("new-chat").click()
        fell_back = _ask(page, fallback.question)
        assert fell_back.get_by_test_id("route").inner_text() == "retrieve"
        assert fell_back.get_by_test_id("fallback").inner_text() == f"Fallback decision: {fallback.error}"
        assert fell_back.get_by_test_id("score").inner_text() == "n/a"
        assert fell_back.get_by_test_id("certainty").inner_text() == "stated certainty: none"
        assert fell_back.get_by_test_id("passage").count() > 0
        assert (_stat(page, "requests"), _stat(page, "retrieval-rate")) == ("2", "50.0%")


#: The page's layout at the current width, after the latest question and its answer.
MEASURE_LAYOUT = """() => {
  const box = (el) => el.getBoundingClientRect();
  const width = window.innerWidth;
  const header = box(document.querySelector("header"));
  const turns = [...document.querySelectorAll('[data-testid="conversation"] > li')].slice(-2).map(box);
  const card = [...document.querySelectorAll('[data-testid="decision"]')].pop();
  const inCard = [card, ...card.querySelectorAll("*")].map(box).filter((b) => b.width > 0);
  return {
    overflow: document.documentElement.scrollWidth - width,
    header_share: header.height / window.innerHeight,
    header_overlap: Math.max(...turns.map((t) => Math.min(t.bottom, header.bottom) - Math.max(t.top, header.top)), 0),
    question_share: box(document.querySelector('[data-testid="question"]')).width / width,
    card_overflow: Math.max(...inCard.map((b) => Math.max(b.right - width, -b.left, b.width - width))),
  };
}"""


def test_the_page_fits_a_phone_a_tablet_and_a_desktop(served, browser_page, tmp_path):
    page = browser_page
    page.goto(served.url)
    page.get_by_test_id("max-tokens").fill(str(FEW_TOKENS))
    for width, height in ((375, 667), (768, 1024), (1400, 900)):
        page.set_viewport_size({"width": width, "height": height})
        # a retrieved answer: its card has the neighbours' table and the passages
        _ask(page, served.retrieve)
        layout = page.evaluate(MEASURE_LAYOUT)
        page.screenshot(path=tmp_path / f"page-{width}.png")  # what the user sees, as measured
        assert layout["overflow"] <= 0, (width, layout)  # no horizontal scroll
        assert layout["header_share"] <= 0.15 and layout["header_overlap"] <= 0, (width, layout)
        assert layout["card_overflow"] <= 0.5, (width, layout)
        if width < 600:  # a phone: the question box takes the width, the controls wrap below it
            assert layout["question_share"] >= 0.85, (width, layout)


def test_a_reload_keeps_the_conversation_and_new_chat_clears_it(served, browser_page):
    page = browser_page
    page.goto(served.url)
    page.get_by_test_id("max-tokens").fill(str(FEW_TOKENS))
    asked = _ask(page, served.direct)
    text = asked.get_by_test_id("answer-text").inner_text()

    page.reload()
    restored = page.get_by_test_id("answer")
    assert page.get_by_test_id("user-turn").all_inner_texts() == [served.direct]
    assert restored.count() == 1 and restored.get_attribute("data-state") == "done"
    assert restored.get_by_test_id("answer-text").inner_text() == text
    assert restored.get_by_test_id("route").inner_text() == "direct"
    assert restored.get_by_test_id("judged").inner_text() == f"judged: {served.direct}"
    assert len(_neighbours(restored)) == served.gate.k
    assert page.get_by_test_id("empty").is_hidden()
    # the restored turns are still the conversation's history
    page.get_by_test_id("max-tokens").fill(str(FEW_TOKENS))
    follow_up = _ask(page, "And why?")
    judged = follow_up.get_by_test_id("judged").inner_text()
    assert served.direct in judged and judged.endswith("And why?"), judged

    page.get_by_test_id("new-chat").click()
    page.get_by_test_id("new-conversation").wait_for()
    page.reload()
    page.get_by_test_id("gate-name").filter(has_text="skr-knn").wait_for()
    assert page.get_by_test_id("conversation").inner_text() == "" and page.get_by_test_id("empty").is_visible()


def test_a_stream_cut_before_its_end_shows_an_error_on_its_answer(served, browser_page):
    page = browser_page
    with ServedApp(_cutting_proxy(served.url)) as proxy:
        page.goto(proxy.url)
        page.get_by_test_id("max-tokens").fill(str(FEW_TOKENS))
        page.get_by_test_id("question").fill(served.direct)
        page.get_by_test_id("send").click()
        answer = page.get_by_test_id("answer").and_(page.locator('[data-state="error"]'))
        answer.wait_for(timeout=120_000)
    assert "before its end" in answer.get_by_test_id("answer-error").inner_text()
    # what came before the cut stays: the decision of the header and the streamed text
    assert answer.get_by_test_id("route").inner_text() == "direct"
    assert answer.get_by_test_id("answer-text").inner_text().strip()
    assert answer.get_by_test_id("feedback-down").is_hidden() and page.get_by_test_id("send").is_enabled()


def test_the_judged_text_of_a_long_follow_up_is_shown_whole(served, browser_page):
    page = browser_page
    page.set_viewport_size({"width": 375, "height": 667})
    page.goto(served.url)
    page.get_by_test_id("max-tokens").fill(str(FEW_TOKENS))
    _ask(page, served.direct)
    long_follow_up = "And " + " and ".join(f"why, in case number {i}" for i in range(40)) + "? " + "x" * 120
    judged = _ask(page, long_follow_up).get_by_test_id("judged")
    assert judged.inner_text().endswith(long_follow_up) and served.direct in judged.inner_text()
    # nothing scrolls or is cut inside the block: every line is shown
    scroll = judged.evaluate("(el) => [el.scrollHeight - el.clientHeight, el.scrollWidth - el.clientWidth]")
    assert scroll == [0, 0], scroll


#: Headers of the body as the server framed it; the proxy's server frames its own.
DROPPED_HEADERS = (b"content-length", b"content-encoding", b"transfer-encoding")


def _cutting_proxy(url: str):
    """An ASGI app forwarding to the server at ``url`` that ends every event stream
    before its last chunk (the one with the decision record), without ``[DONE]``: the
    connection closes as if the server had gone away mid-answer."""

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return  # no lifespan to run
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode(): v.decode() for k, v in scope["headers"] if k in (b"content-type", b"authorization")}
        async with (
            httpx.AsyncClient(timeout=None) as client,
            client.stream(scope["method"], url + scope["path"], content=body, headers=headers) as response,
        ):
            kept = [(k, v) for k, v in response.headers.raw if k.lower() not in DROPPED_HEADERS]
            await send({"type": "http.response.start", "status": response.status_code, "headers": kept})
            async for event in _events_before_the_record(response):
                await send({"type": "http.response.body", "body": event, "more_body": True})
            await send({"type": "http.response.body", "body": b""})

    return app


async def _events_before_the_record(response: httpx.Response):
    """The body of ``response``; for an event stream, its events up to the one
    carrying the decision record."""
    if not response.headers.get("content-type", "").startswith("text/event-stream"):
        yield await response.aread()
        return
    async for line in response.aiter_lines():
        if '"adaptive_gates"' in line:
            return
        yield (line + "\n").encode()


def test_a_conversation_past_the_servers_bound_says_to_start_a_new_chat(served_gate_dir, served_corpus, browser_page):
    page = browser_page
    bounded = ("--max-conversation-tokens", "40", "--max-tokens", str(MAX_TOKENS))
    with command_in_process("--gate", served_gate_dir, "--corpus", served_corpus, "--no-save", *bounded) as server:
        page.goto(server.url)
        page.get_by_test_id("gate-name").filter(has_text="skr-knn").wait_for()
        question = "Who wrote the novel Moby Dick, and in which year was it published?"
        first = _ask(page, question)
        assert first.get_by_test_id("new-chat-hint").is_hidden()
        page.get_by_test_id("question").fill(question)
        page.get_by_test_id("question").press("Enter")
        refused = page.get_by_test_id("answer").nth(1).and_(page.locator('[data-state="error"]'))
        refused.wait_for(timeout=60_000)
        error = refused.get_by_test_id("answer-error").inner_text()
        assert error.startswith("HTTP 400: the conversation is ") and "start a new chat" in error, error
        hint = refused.get_by_test_id("new-chat-hint")
        assert hint.is_visible() and "Press New chat to go on" in hint.inner_text()
        page.get_by_test_id("new-chat").click()
        assert _ask(page, question).get_by_test_id("answer-text").inner_text().strip()

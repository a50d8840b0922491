"""AdaptiveGatesChatModel streams the embedded SmolLM2's reply as it is generated: one
chunk per token, joined equal to ``invoke``, sync and async, in chains and events."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessageChunk
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate

from adaptive_gates.models import LocalChatModel, ThreadedAsyncChat
from langchain_adaptive_gates import AdaptiveGatesChatModel

pytestmark = pytest.mark.usefixtures("one_torch_thread")

FRANCE = "What is the capital of France?"
SKY = "Explain in two sentences why the sky looks blue during the day."


@pytest.fixture(scope="module")
def llm() -> AdaptiveGatesChatModel:
    """The embedded SmolLM2, short replies: SKY's long enough to hold a stop string
    across tokens, FRANCE's (8 tokens with its end) ending on its own."""
    return AdaptiveGatesChatModel(max_tokens=12)


@pytest.fixture(scope="module")
def france(llm):
    """FRANCE answered whole, with its token log-probs and two alternatives each: the
    reply several tests compare their streams with, generated once (the tests only read it)."""
    return llm.invoke(FRANCE, logprobs=True, top_logprobs=2)


class Tokens(BaseCallbackHandler):
    """The tokens a run reports through ``on_llm_new_token``."""

    def __init__(self) -> None:
        self.tokens: list[str] = []

    def on_llm_new_token(self, token: str, **kwargs) -> None:
        self.tokens.append(token)


def stream_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("token stream")]


def test_stream_yields_a_chunk_per_token_that_join_into_invoke(llm, boolq):
    for question in [SKY, boolq[0]["question"] + "?"]:
        whole = llm.invoke(question)
        tokens = Tokens()
        chunks = list(llm.stream(question, config={"callbacks": [tokens]}))
        assert len(chunks) > 2 and "".join(c.content for c in chunks) == whole.content
        assert tokens.tokens == [c.content for c in chunks]  # each reported once
        last = chunks[-1]
        assert last.chunk_position == "last" and all(c.chunk_position is None for c in chunks[:-1])
        assert last.usage_metadata == whole.usage_metadata and all(c.usage_metadata is None for c in chunks[:-1])
        assert last.response_metadata["finish_reason"] == whole.response_metadata["finish_reason"]
        assert last.response_metadata["model_name"] == llm.model_name


def test_astream_joins_into_ainvoke(llm, boolq):
    question = boolq[1]["question"] + "?"

    async def run():
        return await llm.ainvoke(question), [c async for c in llm.astream(question)]

    whole, chunks = asyncio.run(run())
    assert len(chunks) > 2 and "".join(c.content for c in chunks) == whole.content
    assert chunks[-1].chunk_position == "last" and chunks[-1].usage_metadata == whole.usage_metadata


def test_a_stop_string_cuts_the_stream_where_it_cuts_invoke(llm):
    free = [c.content for c in llm.stream(SKY)]
    stop = free[2][-2:] + free[3][:2]  # completed by a later token than the one it starts in
    cut = llm.invoke(SKY, stop=[stop])
    assert cut.response_metadata["finish_reason"] == "stop" and cut.content == "".join(free).split(stop)[0]
    chunks = list(llm.stream(SKY, stop=[stop]))
    assert "".join(c.content for c in chunks) == cut.content
    assert chunks[-1].response_metadata["finish_reason"] == "stop"


def test_astream_events_show_one_stream_event_per_token(llm, france):
    chain = ChatPromptTemplate.from_messages([("human", "{q}")]) | llm | StrOutputParser()

    async def run():
        events = [e async for e in chain.astream_events({"q": FRANCE}, version="v2")]
        return [e["data"]["chunk"] for e in events if e["event"] == "on_chat_model_stream"]

    chunks = asyncio.run(run())
    tokens = [t["token"] for t in france.response_metadata["logprobs"]["content"]]
    assert france.response_metadata["finish_reason"] == "eos" and len(tokens) > 3
    # Every generated token is one event; the end-of-turn token's is the empty last one.
    assert [c.content for c in chunks] == [*tokens[:-1], ""]
    assert chunks[-1].chunk_position == "last"


def test_logprobs_and_usage_come_on_the_last_chunk(llm, france):
    chunks = list(llm.stream(FRANCE, logprobs=True, top_logprobs=2))
    assert all("logprobs" not in c.response_metadata for c in chunks[:-1])
    assert chunks[-1].response_metadata["logprobs"] == france.response_metadata["logprobs"]
    merged = sum(chunks[1:], chunks[0])
    assert isinstance(merged, AIMessageChunk) and merged.usage_metadata == france.usage_metadata
    assert merged.response_metadata["logprobs"]["content"][0]["top_logprobs"][1]["logprob"] <= 0


def test_stream_events_v3_report_each_token_to_callbacks(llm, france):
    tokens = Tokens()
    stream = llm.stream_events(FRANCE, version="v3", config={"callbacks": [tokens]})
    events = list(stream)
    assert len(tokens.tokens) > 2 and "".join(tokens.tokens) == stream.output.text == france.text
    assert len(events) > len(tokens.tokens)


def test_leaving_a_stream_early_leaves_the_model_usable(llm):
    whole = llm.invoke(SKY)
    seen = []
    for chunk in llm.stream(SKY):
        seen.append(chunk.content)
        if len(seen) == 2:
            break
    assert all(seen) and not stream_threads()  # the generation stopped with the loop
    with ThreadPoolExecutor(1) as pool:
        again = pool.submit(llm.invoke, SKY).result()
    assert again.content == whole.content

    async def break_async():
        async with contextlib.aclosing(llm.astream(SKY)) as chunks:
            first = await anext(chunks)
        return first, await llm.ainvoke(SKY)

    first, again = asyncio.run(break_async())
    assert first.content and again.content == whole.content and not stream_threads()


def test_a_core_model_that_cannot_stream_gives_one_chunk(boolq):
    plain = AdaptiveGatesChatModel(chat_model=ThreadedAsyncChat(LocalChatModel()), max_tokens=12)
    question = boolq[2]["question"] + "?"
    whole = plain.invoke(question)
    (chunk,) = list(plain.stream(question))
    assert chunk.content == whole.content and chunk.chunk_position == "last"
    assert chunk.usage_metadata == whole.usage_metadata

    async def run():
        return [c async for c in plain.astream(question)]

    (achunk,) = asyncio.run(run())
    assert achunk.content == whole.content

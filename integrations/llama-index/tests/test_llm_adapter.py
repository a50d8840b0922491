"""The embedded SmolLM2 as a LlamaIndex LLM, and MiniLM as its embedding model."""

from __future__ import annotations

import math

import numpy as np
import pytest
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.instrumentation.events.llm import LLMChatInProgressEvent
from llama_index.core.llms import LLM
from llama_index.embeddings.adaptive_gates import AdaptiveGatesEmbedding, LlamaIndexEmbedder
from llama_index.llms.adaptive_gates import AdaptiveGatesLLM

from adaptive_gates import BackendError, SKRKnnGate
from adaptive_gates.models import ChatReply, Embedder
from adaptive_gates.models.chat.base import with_achat

from .doubles import ScriptedChat

pytestmark = pytest.mark.usefixtures("one_torch_thread")

QUESTION = [ChatMessage(role=MessageRole.USER, content="What is the capital of France? Answer in one word.")]


def test_the_embedded_model_answers_as_a_llamaindex_llm(llm):
    assert isinstance(llm, LLM) and llm.metadata.is_chat_model
    assert "smollm2" in llm.metadata.model_name.lower()
    reply = llm.chat(QUESTION)
    assert reply.message.role == MessageRole.ASSISTANT
    assert "paris" in reply.message.content.lower()
    assert llm.complete("What is the capital of France? Answer in one word.").text == reply.message.content


def test_log_probs_come_with_the_reply():
    llm = AdaptiveGatesLLM(max_tokens=4, logprobs=True, top_logprobs=3)
    reply = llm.chat(QUESTION)
    assert reply.logprobs, "asked-for log-probs are missing"
    for position in reply.logprobs:
        chosen, *alternatives = position
        assert chosen.logprob <= 0 and len(alternatives) <= 3
        assert chosen.token not in {alt.token for alt in alternatives}
    # greedy decoding: the chosen token is the likeliest at its position
    assert all(p[0].logprob >= max((a.logprob for a in p[1:]), default=-math.inf) - 1e-4 for p in reply.logprobs)
    text = "".join(p[0].token for p in reply.logprobs)
    assert text.strip() and reply.message.content.strip().startswith(text.strip()[:3])


def test_streams_yield_each_token_as_it_is_generated(llm, recorder):
    chunks = list(llm.stream_chat(QUESTION, max_tokens=8))
    assert len(chunks) > 2, "a multi-token reply came as one chunk"
    whole = llm.chat(QUESTION, max_tokens=8)
    assert "".join(c.delta for c in chunks) == chunks[-1].message.content == whole.message.content
    # each response holds the text so far, as LlamaIndex's own LLMs stream
    assert all(c.message.content == "".join(d.delta for d in chunks[: i + 1]) for i, c in enumerate(chunks))
    assert chunks[-1].additional_kwargs["finish_reason"] == whole.additional_kwargs["finish_reason"]
    assert chunks[-1].raw == whole.raw and chunks[-1].raw["usage"]["completion_tokens"] >= len(chunks) - 1
    # LlamaIndex's instrumentation sees every chunk
    assert [e.response.delta for e in recorder.of(LLMChatInProgressEvent)] == [c.delta for c in chunks]
    completion = list(llm.stream_complete("Name a colour.", max_tokens=8))
    assert len(completion) > 2 and completion[-1].text == llm.complete("Name a colour.", max_tokens=8).text
    assert "".join(c.delta for c in completion) == completion[-1].text


def test_the_last_streamed_chunk_carries_the_log_probs():
    llm = AdaptiveGatesLLM(max_tokens=4, logprobs=True, top_logprobs=2)
    *pieces, last = llm.stream_chat(QUESTION)
    assert pieces and all(p.logprobs is None for p in pieces)
    assert last.logprobs == llm.chat(QUESTION).logprobs and len(last.logprobs) >= len(pieces)


def test_a_stream_left_early_frees_the_model(llm):
    stream = llm.stream_complete("Count from one to twenty.", max_tokens=24)
    first = next(stream)
    stream.close()  # stops the generation: the model answers the next call at once
    assert first.delta and llm.complete("Count from one to twenty.", max_tokens=24).text.startswith(first.text)


async def test_async_streams_match_the_reply_without_blocking_the_loop(llm, loop_ticks):
    async with loop_ticks:
        chunks = [c async for c in await llm.astream_chat(QUESTION, max_tokens=8)]
    assert loop_ticks.count > 0, "the event loop was blocked while the model streamed"
    assert len(chunks) > 2 and "".join(c.delta for c in chunks) == llm.chat(QUESTION, max_tokens=8).message.content
    completion = [c async for c in await llm.astream_complete("Name a colour.", max_tokens=8)]
    assert len(completion) > 2 and "".join(c.delta for c in completion) == completion[-1].text
    assert completion[-1].text == (await llm.acomplete("Name a colour.", max_tokens=8)).text


async def test_a_chat_model_that_cannot_stream_gives_one_chunk():
    llm = AdaptiveGatesLLM(chat_model=with_achat(ScriptedChat(ChatReply("Paris."))))
    (chunk,) = llm.stream_chat(QUESTION)
    assert chunk.delta == chunk.message.content == "Paris."
    (achunk,) = [c async for c in await llm.astream_complete("Capital of France?")]
    assert achunk.delta == achunk.text == "Paris."


async def test_async_calls_leave_the_event_loop_free(llm, loop_ticks):
    async with loop_ticks:
        reply = await llm.achat(QUESTION)
    assert reply.message.content == llm.chat(QUESTION).message.content
    assert loop_ticks.count > 0, "the event loop was blocked while the model worked"
    chunks = [c async for c in await llm.astream_complete("Name a colour.")]
    assert chunks[-1].text == (await llm.acomplete("Name a colour.")).text


def test_roles_the_core_cannot_take_are_refused(llm):
    with pytest.raises(ValueError, match="tool"):
        llm.chat([ChatMessage(role=MessageRole.TOOL, content="42")])
    with pytest.raises(TypeError, match="unsupported call options"):
        llm.chat(QUESTION, top_p=0.5)


def test_a_chat_model_that_is_not_the_cores_is_refused():
    with pytest.raises(TypeError, match="chat_model must implement the core's ChatModel protocol, got str"):
        AdaptiveGatesLLM(chat_model="gpt-4o").chat(QUESTION)


def test_the_embedded_embedder_as_a_llamaindex_embedding(embed_model, core_embedder):
    assert isinstance(embed_model, BaseEmbedding) and embed_model.model_name == core_embedder.model_id
    texts = ["Who wrote Hamlet?", "The capital of France is Paris."]
    np.testing.assert_allclose(embed_model.get_text_embedding_batch(texts), core_embedder.embed(texts), atol=1e-6)
    np.testing.assert_allclose(embed_model.get_query_embedding(texts[0]), core_embedder.embed(texts[:1])[0], atol=1e-6)


async def test_async_embedding_matches(embed_model):
    vector = await embed_model.aget_query_embedding("Who wrote Hamlet?")
    np.testing.assert_allclose(vector, embed_model.get_query_embedding("Who wrote Hamlet?"), atol=1e-6)


def test_any_llamaindex_embedding_encodes_for_a_gate(embed_model, core_embedder):
    adapted = LlamaIndexEmbedder(embed_model)
    assert isinstance(adapted, Embedder)
    assert adapted.model_id == core_embedder.model_id and adapted.dimension == core_embedder.dimension
    questions = ["Who wrote Hamlet?", "What was the population of Tuvalu in the 2021 census?"]
    direct = SKRKnnGate(core_embedder, k=1).fit(questions, [0, 1])
    through = SKRKnnGate(adapted, k=1).fit(questions, [0, 1])
    probe = ["Who is the author of Hamlet?", "How many people lived in Tuvalu in 2021?"]
    assert [d.retrieve for d in through.decide_batch(probe)] == [d.retrieve for d in direct.decide_batch(probe)]
    np.testing.assert_allclose(through.score(probe), direct.score(probe), atol=1e-5)


def test_a_failing_embedding_model_is_a_backend_error(core_embedder):
    class Down(AdaptiveGatesEmbedding):
        def _get_text_embeddings(self, texts):
            raise ConnectionError("embedding service down")

    with pytest.raises(BackendError, match="service down"):
        LlamaIndexEmbedder(Down(core_embedder), dimension=core_embedder.dimension).embed(["a question"])
    with pytest.raises(TypeError, match="BaseEmbedding"):
        LlamaIndexEmbedder(core_embedder)

"""LlamaIndex's ``OpenAILike`` pointed at ``adaptive-gates serve`` gets selective
retrieval without a change to its code."""

from __future__ import annotations

import pytest
from llama_index.core.llms import ChatMessage
from llama_index.llms.openai_like import OpenAILike

from adaptive_gates.bundled.datasets import packaged_corpus
from support.serve_process import serving

pytestmark = pytest.mark.live_server  # a real server: left out of make test-fast


def test_openai_like_talks_to_the_server_and_gets_the_decision(knn_gate, served_chat_model):
    passages = packaged_corpus("boolq")[:12]
    with serving(knn_gate, passages, served_chat_model, max_tokens=8) as served:
        llm = OpenAILike(
            api_base=f"{served.url}/v1",
            api_key="none",
            model=served_chat_model.model_id,
            is_chat_model=True,
            max_tokens=8,
        )
        question = [ChatMessage(role="user", content="What was the population of Tuvalu in the 2021 census?")]
        answer = llm.chat(question)
        streamed = list(llm.stream_chat(question))
    record = answer.raw.model_extra["adaptive_gates"]  # the completion as the SDK parsed it
    assert record["route"] == "retrieve" and len(record["passages"]) == 3
    assert answer.message.content and streamed[-1].message.content == answer.message.content

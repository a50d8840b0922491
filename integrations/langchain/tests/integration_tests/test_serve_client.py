"""LangChain's own ``ChatOpenAI`` pointed at ``adaptive-gates serve`` gets selective
retrieval without a change to its code, and sees each decision in the response headers."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import AIMessageChunk
from langchain_openai import ChatOpenAI

from adaptive_gates.records.data import CorpusRecord
from support.serve_process import serving

pytestmark = pytest.mark.live_server  # a real server: left out of make test-fast


def test_chat_openai_talks_to_the_server_and_sees_the_decision(knn_gate, boolq, served_chat_model):
    passages = [CorpusRecord(str(i), r["title"], r["passage"]) for i, r in enumerate(boolq)]
    with serving(knn_gate, passages, served_chat_model, max_tokens=8) as served:
        llm = ChatOpenAI(
            base_url=f"{served.url}/v1",
            api_key="none",
            model=served_chat_model.model_id,
            max_tokens=8,
            include_response_headers=True,
        )
        known = llm.invoke("Who wrote Hamlet?")
        unknown = llm.invoke("What was the population of Tuvalu in the 2021 census?")
        chunks = list(llm.stream("Who wrote Hamlet?"))
    decisions = [json.loads(m.response_metadata["headers"]["x-adaptive-gates-decision"]) for m in (known, unknown)]
    assert [d["route"] for d in decisions] == ["direct", "retrieve"]  # k=1: the stored question's own label
    assert known.content and unknown.content
    streamed = sum(chunks[1:], chunks[0])
    assert isinstance(streamed, AIMessageChunk) and streamed.content == known.content

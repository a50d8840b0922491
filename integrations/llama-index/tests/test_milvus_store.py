"""LlamaIndex's ``MilvusVectorStore`` over a real Milvus (Lite) server: it declares
pymilvus<3, and over the core's pymilvus 3 the SKR memory in it fails with a raw
``MilvusException`` once Milvus restarts. The memory refuses the store when it is built,
naming both versions, before anything is written to it."""

from __future__ import annotations

from importlib import metadata

import pytest
from llama_index.vector_stores.adaptive_gates import VectorStoreMemory
from llama_index.vector_stores.milvus import MilvusVectorStore

from adaptive_gates import BackendMisconfiguredError, SKRKnnGate
from support.milvus_server import milvus_uri  # noqa: F401  # the core suite's fixture (a real server)


def test_the_memory_refuses_the_store_naming_the_versions(milvus_uri, core_embedder):  # noqa: F811
    assert metadata.version("pymilvus").startswith("3."), "the core's milvus extra installs pymilvus 3"
    store = MilvusVectorStore(uri=milvus_uri, collection_name="li_skr_memory", dim=384, overwrite=True)
    gate = SKRKnnGate(core_embedder, k=1, memory=VectorStoreMemory.factory(lambda: store))
    store_package = "llama-index-vector-stores-milvus"
    expected = (
        rf"MilvusVectorStore comes from {store_package} {metadata.version(store_package)}, which needs pymilvus<3"
        rf".*but pymilvus {metadata.version('pymilvus')} is installed.*MilvusMemory"
    )
    with pytest.raises(BackendMisconfiguredError, match=expected):
        gate.fit(["Who wrote Hamlet?", "What was the population of Tuvalu in 2021?"], [0, 1])
    assert not gate.is_fitted and store.client.query("li_skr_memory", filter="", limit=5, output_fields=["id"]) == []
    with pytest.raises(BackendMisconfiguredError, match="needs pymilvus<3"):
        VectorStoreMemory.attach(store)(384)  # reattaching a saved gate: refused the same way

"""langchain-tests' standard suites for the chat model, the embeddings and the gated
retriever."""

from __future__ import annotations

import pytest
from langchain_core.load import dumpd, load
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_tests.integration_tests import (
    ChatModelIntegrationTests,
    EmbeddingsIntegrationTests,
    RetrieversIntegrationTests,
)
from langchain_tests.unit_tests import ChatModelUnitTests

from langchain_adaptive_gates import IMPORT_MAPPINGS, AdaptiveGatesChatModel, AdaptiveGatesEmbeddings, GatedRetriever

from ..conftest import KNOWN, UNKNOWN

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class TestAdaptiveGatesChatModelUnit(ChatModelUnitTests):
    @property
    def chat_model_class(self) -> type[AdaptiveGatesChatModel]:
        return AdaptiveGatesChatModel

    @property
    def standard_chat_model_params(self) -> dict:
        return {**super().standard_chat_model_params, "max_tokens": 8}  # short replies keep the suite quick

    @pytest.mark.xfail(
        reason="LangChain's loader builds only the classes of its own partner packages unless told of others "
        "(additional_import_mappings=IMPORT_MAPPINGS), which the suite's test does not pass; "
        "test_serdes_with_the_package_mappings is the same test with them",
        strict=True,
    )
    def test_serdes(self, model, snapshot) -> None:
        super().test_serdes(model, snapshot)

    def test_serdes_with_the_package_mappings(self, model, snapshot) -> None:
        """The suite's serialisation test, loading as this package's classes load."""
        assert self.chat_model_class.is_lc_serializable()
        serialized = dumpd(model)
        assert serialized == snapshot(name="serialized")
        loaded = load(
            serialized,
            valid_namespaces=model.get_lc_namespace()[:1],
            allowed_objects="all",
            additional_import_mappings=IMPORT_MAPPINGS,
        )
        assert isinstance(loaded, AdaptiveGatesChatModel) and loaded.dict() == model.dict()


class TestAdaptiveGatesChatModelIntegration(ChatModelIntegrationTests):
    @property
    def chat_model_class(self) -> type[AdaptiveGatesChatModel]:
        return AdaptiveGatesChatModel

    @property
    def standard_chat_model_params(self) -> dict:
        return {**super().standard_chat_model_params, "max_tokens": 8}  # short replies keep the suite quick


class TestAdaptiveGatesEmbeddingsIntegration(EmbeddingsIntegrationTests):
    @property
    def embeddings_class(self) -> type[AdaptiveGatesEmbeddings]:
        return AdaptiveGatesEmbeddings

    @property
    def embedding_model_params(self) -> dict:
        from adaptive_gates.models import default_embedder

        return {"embedder": default_embedder()}  # the embedded MiniLM, loaded once


def _gated_retriever(**kwargs) -> GatedRetriever:
    """A kNN gate and an in-memory store, both on the embedded MiniLM."""
    from adaptive_gates import SKRKnnGate
    from adaptive_gates.models import default_embedder

    embedder = default_embedder()
    gate = SKRKnnGate(embedder, k=1).fit(KNOWN + UNKNOWN, [0] * len(KNOWN) + [1] * len(UNKNOWN))
    store = InMemoryVectorStore(AdaptiveGatesEmbeddings(embedder))
    store.add_texts(
        [
            "Nauru had 11,680 inhabitants at the 2021 census.",
            "Nauru is an island country in Micronesia.",
            "Tuvalu's 2022 census counted 10,643 people.",
            "Macbeth is a tragedy by William Shakespeare.",
            "The Mona Lisa hangs in the Louvre.",
        ]
    )
    return GatedRetriever(retriever=store.as_retriever(search_kwargs={"k": 5}), gate=gate, **kwargs)


class TestGatedRetrieverStandard(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[GatedRetriever]:
        return _gated_retriever  # type: ignore[return-value]

    @property
    def retriever_constructor_params(self) -> dict:
        return {}

    @property
    def retriever_query_example(self) -> str:
        return "What was the population of Nauru in the 2021 census?"

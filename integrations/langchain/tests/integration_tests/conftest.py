import pytest
from openai_server import ChatCompletionsServer  # the core suite's (pythonpath in pyproject.toml)


@pytest.fixture(scope="session")
def chat_llm():
    """The embedded SmolLM2 as a LangChain chat model, short replies."""
    from langchain_adaptive_gates import AdaptiveGatesChatModel

    return AdaptiveGatesChatModel(max_tokens=12)


@pytest.fixture(scope="session")
def small_uncertainty():
    """SeaKR's U on the embedded SmolLM2 with few, short samples, so tests stay quick."""
    from adaptive_gates import SelfAwareUncertainty

    return SelfAwareUncertainty(k=4, max_new_tokens=8)


@pytest.fixture(scope="session")
def served_chat_model():
    """The embedded SmolLM2 as the chat model the test server answers with, loaded once."""
    from adaptive_gates.models import LocalChatModel

    chat_model = LocalChatModel()
    chat_model.lm.model  # load before serving, so the first request is not a slow one
    return chat_model


@pytest.fixture
def openai_server(served_chat_model):
    """The core suite's real OpenAI-compatible HTTP server (``tests/openai_server.py``)
    on 127.0.0.1, answering with the embedded SmolLM2; tests inject faults with
    ``set_fault`` and count requests with ``requests``. One per test, so a request an
    earlier test gave up on is never counted here."""
    server = ChatCompletionsServer(served_chat_model).start()
    yield server
    server.close()

import pytest

# the core suite's test server and its fixtures (pythonpath in pyproject.toml)
from support.openai_server import openai_server, served_chat_model  # noqa: F401


@pytest.fixture(scope="session")
def chat_llm():
    """The embedded SmolLM2 as a LangChain chat model, short replies."""
    from langchain_adaptive_gates import AdaptiveGatesChatModel

    return AdaptiveGatesChatModel(max_tokens=12)


@pytest.fixture(scope="session")
def small_uncertainty():
    """SeaKR's U on the embedded SmolLM2 with few, short samples, so tests stay quick
    (the rankings checked are those of the U measured, whatever the samples' length)."""
    from adaptive_gates import SelfAwareUncertainty

    return SelfAwareUncertainty(k=4, max_new_tokens=4)

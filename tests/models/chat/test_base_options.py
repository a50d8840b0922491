"""A framework call's options in OpenAI's names, as the core chat call takes them."""

from __future__ import annotations

import pytest

from adaptive_gates.models import options_from_openai


class M:
    """A framework's chat model: its own settings, as fields."""

    max_tokens = 32
    temperature = 0.0
    logprobs = False
    top_logprobs = 0


MODEL = M()


def test_the_call_overrides_the_models_settings():
    assert options_from_openai(MODEL, {}) == ({"max_tokens": 32, "temperature": 0.0, "top_logprobs": 0}, 0)
    options, top = options_from_openai(MODEL, {"max_tokens": 8, "logprobs": True, "top_logprobs": 5})
    assert options == {"max_tokens": 8, "temperature": 0.0, "top_logprobs": 5} and top == 5


def test_log_probs_without_alternatives_ask_for_one_and_return_none():
    options, top = options_from_openai(MODEL, {"logprobs": True})
    assert options["top_logprobs"] == 1 and top == 0


def test_stop_strings_are_passed_when_the_framework_has_them():
    assert options_from_openai(MODEL, {}, stop=["\n"])[0]["stop"] == ["\n"]
    assert options_from_openai(MODEL, {}, stop=[])[0]["stop"] is None
    assert "stop" not in options_from_openai(MODEL, {})[0]


def test_an_option_the_model_does_not_take_is_refused_by_name():
    with pytest.raises(TypeError, match=r"unsupported call options for M: \['seed'\]"):
        options_from_openai(MODEL, {"seed": 1, "formatted": True}, also_taken={"formatted"})

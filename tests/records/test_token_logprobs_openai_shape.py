"""The one reader and writer of token log-probabilities in OpenAI's shape: what records
store, what the OpenAI backend reads from a reply, and what both frameworks write and
read in their messages."""

from __future__ import annotations

import math

import pytest
from openai.types.chat import ChatCompletionTokenLogprob
from openai.types.chat.chat_completion_token_logprob import TopLogprob

from adaptive_gates.extend import tokens_from_openai, tokens_to_openai
from adaptive_gates.models import TokenLogprob

TOKENS = (
    TokenLogprob("Sha", -0.05, (("Sha", -0.05), ("Mar", -3.2), ("Ben", -4.0))),
    TokenLogprob("kespeare", -0.001, (("kespeare", -0.001),)),
    TokenLogprob("é", -1.5, ()),
)


def test_written_tokens_read_back_the_same():
    assert tokens_from_openai(tokens_to_openai(TOKENS)) == TOKENS
    assert tokens_from_openai(tokens_to_openai(TOKENS, with_bytes=True)) == TOKENS
    assert tokens_from_openai(tokens_to_openai(TOKENS), strict=False) == TOKENS


def test_the_writer_keeps_the_alternatives_asked_for_and_the_bytes_of_a_reply():
    written = tokens_to_openai(TOKENS, top=2, with_bytes=True)
    assert written[0] == {
        "token": "Sha",
        "logprob": -0.05,
        "bytes": list(b"Sha"),
        "top_logprobs": [
            {"token": "Sha", "logprob": -0.05, "bytes": list(b"Sha")},
            {"token": "Mar", "logprob": -3.2, "bytes": list(b"Mar")},
        ],
    }
    assert written[2]["bytes"] == list("é".encode()) and written[2]["top_logprobs"] == []
    assert "bytes" not in tokens_to_openai(TOKENS)[0]  # records leave them out
    assert tokens_to_openai(()) == []


def test_the_objects_an_openai_client_parses_read_as_their_json():
    parsed = [ChatCompletionTokenLogprob.model_validate(entry) for entry in tokens_to_openai(TOKENS, with_bytes=True)]
    assert isinstance(parsed[0].top_logprobs[0], TopLogprob)
    assert tokens_from_openai(parsed, strict=False) == TOKENS
    assert tokens_from_openai(tuple(parsed)) == TOKENS


@pytest.mark.parametrize(
    ("entries", "problem"),
    [
        ({"token": "a", "logprob": -0.1}, "must be a list of token entries, got dict"),
        ("a", "must be a list of token entries, got str"),
        (None, "must be a list of token entries, got NoneType"),
        ([7], "entry 0 must be an object with 'token' and 'logprob', got int"),
        ([{"logprob": -0.1}], "entry 0: 'token' must be a string, got None"),
        ([{"token": 3, "logprob": -0.1}], "entry 0: 'token' must be a string, got 3"),
        ([{"token": "a"}], "entry 0: 'logprob' must be a number, got None"),
        ([{"token": "a", "logprob": "-0.1"}], "entry 0: 'logprob' must be a number, got '-0.1'"),
        ([{"token": "a", "logprob": True}], "entry 0: 'logprob' must be a number, got True"),
        ([{"token": "a", "logprob": math.nan}], "entry 0: 'logprob' must be a finite number or -inf, got nan"),
        ([{"token": "a", "logprob": math.inf}], "entry 0: 'logprob' must be a finite number or -inf, got inf"),
        ([{"token": "a", "logprob": -0.1, "top_logprobs": {"b": -1}}], "entry 0: 'top_logprobs' must be a list"),
        ([{"token": "a", "logprob": -0.1, "top_logprobs": "b"}], "entry 0: 'top_logprobs' must be a list, got str"),
        (
            [{"token": "a", "logprob": -0.1, "top_logprobs": [{"token": "b", "logprob": math.nan}]}],
            "entry 0, alternative 0: 'logprob' must be a finite number or -inf, got nan",
        ),
    ],
)
def test_a_malformed_shape_is_refused_naming_the_entry(entries, problem):
    for strict in (True, False):
        expected = problem.replace("must be a finite number or -inf", "must be <= 0") if strict else problem
        with pytest.raises(ValueError) as refused:
            tokens_from_openai(entries, strict=strict)
        assert expected in str(refused.value)


def test_only_the_strict_reader_refuses_values_no_model_gives():
    above_zero = [{"token": "a", "logprob": 7.0}]
    chosen_without_mass = [{"token": "a", "logprob": -math.inf}]
    with pytest.raises(ValueError, match=r"entry 0: 'logprob' must be <= 0, got 7\.0"):
        tokens_from_openai(above_zero)
    with pytest.raises(ValueError, match="the chosen token 'a' is -inf"):
        tokens_from_openai(chosen_without_mass)
    # a reply's: the gate judges it afterwards (impossible_logprob) and refuses it by name
    assert tokens_from_openai(above_zero, strict=False) == (TokenLogprob("a", 7.0),)
    assert tokens_from_openai(chosen_without_mass, strict=False)[0].logprob == -math.inf
    no_mass = [{"token": "a", "logprob": -0.1, "top_logprobs": [{"token": "b", "logprob": -math.inf}]}]
    assert tokens_from_openai(no_mass)[0].top == (("b", -math.inf),)

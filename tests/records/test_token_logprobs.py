"""Token log-probabilities and OpenAI's ``logprobs.content`` shape, both ways."""

from __future__ import annotations

import json
import math
import re

import pytest

from adaptive_gates.records.token_logprobs import (
    TokenLogprob,
    impossible_logprob,
    tokens_from_openai,
    tokens_to_openai,
)

TOKENS = (
    TokenLogprob("Paris", -0.05, (("Paris", -0.05), ("Lyon", -3.2))),
    TokenLogprob(".", 0.0, ((".", 0.0), ("!", -math.inf))),
    TokenLogprob(" end", -1.5),
)


def test_the_openai_shape_round_trips_through_json():
    entries = tokens_to_openai(TOKENS)
    assert entries[0] == {
        "token": "Paris",
        "logprob": -0.05,
        "top_logprobs": [{"token": "Paris", "logprob": -0.05}, {"token": "Lyon", "logprob": -3.2}],
    }
    assert entries[2]["top_logprobs"] == []
    assert tokens_from_openai(json.loads(json.dumps(entries))) == TOKENS


def test_missing_or_empty_alternatives_and_integer_logprobs_are_read():
    entries = [{"token": "a", "logprob": 0}, {"token": "b", "logprob": -1, "top_logprobs": None}]
    assert tokens_from_openai(entries) == (TokenLogprob("a", 0.0), TokenLogprob("b", -1.0))
    assert isinstance(tokens_from_openai(entries)[0].logprob, float)
    assert tokens_from_openai([]) == ()


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ({"token": "a"}, "must be a list of token entries, got dict"),
        (["a"], "entry 0 must be an object with 'token' and 'logprob', got str"),
        ([{"token": 1, "logprob": -1}], "entry 0: 'token' must be a string, got 1"),
        ([{"token": "a", "logprob": "-1"}], "entry 0: 'logprob' must be a number, got '-1'"),
        ([{"token": "a", "logprob": True}], "entry 0: 'logprob' must be a number, got True"),
        ([{"token": "a"}], "entry 0: 'logprob' must be a number, got None"),
        ([{"token": "a", "logprob": 0.5}], "entry 0: 'logprob' must be <= 0, got 0.5"),
        ([{"token": "a", "logprob": math.nan}], "entry 0: 'logprob' must be <= 0, got nan"),
        ([{"token": "a", "logprob": -math.inf}], "entry 0: 'logprob' of the chosen token 'a' is -inf"),
        (
            [{"token": "a", "logprob": -1, "top_logprobs": {"b": -2}}],
            "entry 0: 'top_logprobs' must be a list, got dict",
        ),
        (
            [{"token": "a", "logprob": -1}, {"token": "b", "logprob": -1, "top_logprobs": [{"token": "c"}]}],
            "entry 1, alternative 0: 'logprob' must be a number",
        ),
    ],
)
def test_entries_that_do_not_fit_are_named(entries, message):
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        tokens_from_openai(entries)


def test_an_alternative_without_mass_is_read():
    (token,) = tokens_from_openai(
        [{"token": "a", "logprob": 0, "top_logprobs": [{"token": "b", "logprob": -math.inf}]}]
    )
    assert token.top == (("b", -math.inf),)


def test_impossible_logprob_names_the_first_impossible_value():
    assert impossible_logprob(TOKENS) is None
    assert impossible_logprob(()) is None
    assert impossible_logprob([TokenLogprob("a", -1), TokenLogprob("b", 7.0)]) == (
        "token 1 ('b') has log-probability 7.0, outside (-inf, 0]"
    )
    assert "has log-probability nan" in impossible_logprob([TokenLogprob("a", math.nan)])
    assert "has log-probability -inf" in impossible_logprob([TokenLogprob("a", -math.inf)])
    assert impossible_logprob([TokenLogprob("a", -1, (("b", 0.3),))]) == (
        "token 0's alternative 'b' has log-probability 0.3, outside [-inf, 0]"
    )
    assert impossible_logprob([TokenLogprob("a", -1, (("b", math.nan),))]) is not None


def test_a_token_is_frozen_and_hashable():
    token = TOKENS[0]
    with pytest.raises(AttributeError):
        token.logprob = 0.0  # type: ignore[misc]
    assert len({token, TokenLogprob("Paris", -0.05, (("Paris", -0.05), ("Lyon", -3.2)))}) == 1

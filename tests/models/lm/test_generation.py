"""The record of one continuation and where a growing text stops."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from adaptive_gates.models.lm.generation import Generation, first_stop, settled_length


def test_generation_holds_its_continuation_and_no_alternatives_by_default():
    g = Generation("Paris", [42, 2], [-0.5, -0.1], "eos", 12)
    assert g.top_logprobs == []
    assert (g.text, g.finish_reason, g.prompt_tokens) == ("Paris", "eos", 12)
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.text = "Lyon"  # type: ignore[misc]
    other = Generation("Paris", [42, 2], [-0.5, -0.1], "eos", 12)
    assert g == other
    assert g.top_logprobs is not other.top_logprobs  # each its own list


@pytest.mark.parametrize(
    ("text", "stops", "index"),
    [
        ("Paris.\nQ: next", ["\n"], 6),
        ("Paris.\nQ: next", ["Q:", "\n"], 6),  # the earliest, not the first listed
        ("Paris.\nQ: next", ["next", "Q:"], 7),
        ("Paris", ["\n"], None),
        ("Paris", [], None),
        ("\nParis", ["\n"], 0),
    ],
)
def test_first_stop(text, stops, index):
    assert first_stop(text, stops) == index


@pytest.mark.parametrize(
    ("text", "stops", "settled"),
    [
        ("The answer", [], "The answer"),
        ("The answer", ["\n\n"], "The answer"),
        ("The answer\n", ["\n\n"], "The answer"),  # may become the stop string
        ("The answer\n\nmore", ["\n\n"], "The answer"),  # a stop string: never past it
        ("The answer is", ["is it"], "The answer "),  # "is" may begin "is it"
        ("The answer is", ["XYZ"], "The answer is"),
        ("Caf\ufffd", [], "Caf"),  # a character whose bytes have not all arrived
        ("Caf\ufffd\ufffd", ["\n"], "Caf"),
        ("", ["\n"], ""),
    ],
)
def test_settled_length(text, stops, settled):
    assert text[: settled_length(text, stops)] == settled


def test_settled_text_only_grows_as_tokens_arrive():
    final = "Yes.\nQuestion: what"
    stops = ["\nQuestion:"]
    settled = [final[: settled_length(final[:n], stops)] for n in range(len(final) + 1)]
    for before, after in itertools.pairwise(settled):
        assert after.startswith(before)
    assert settled[-1] == "Yes."

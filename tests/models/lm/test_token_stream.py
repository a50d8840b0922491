"""TokenStream: one generation handed out piece by piece, from the embedded SmolLM2's
``stream`` and from generation functions of one's own that feed it tokens."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from adaptive_gates.models.lm.generation import Generation
from adaptive_gates.models.lm.token_stream import TokenStream

LONG = "Write a long story about a dragon who learns to cook."


def _held_elsewhere(lm) -> bool:
    """Whether another thread finds the model's lock taken right now."""
    taken = []

    def probe():
        got = lm._lock.acquire(blocking=False)
        taken.append(not got)
        if got:
            lm._lock.release()

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    return taken[0]


def _feeding(lm, text: str, final: str, *, eos_after: bool = False, between=None):
    """A generation function that feeds ``text``'s tokens one by one (after the prompt's,
    which a streamer is handed first) and finishes with ``final`` as its text;
    ``between(i)`` runs after the i-th token."""
    ids = lm.tokenizer(text, add_special_tokens=False).input_ids
    if eos_after:
        ids = [*ids, lm.eos_token_id, *lm.tokenizer(" after the end", add_special_tokens=False).input_ids]

    def run(feed) -> Generation:
        feed.put(np.array([[1, 2, 3]]))  # the prompt
        for i, token in enumerate(ids):
            feed.put(np.array([token]))
            if between is not None:
                between(i)
        feed.end()
        return Generation(final, ids, [0.0] * len(ids), "stop", 3)

    return run


def _stream(lm, run, stops=()):
    return TokenStream(run, lm._decode, list(stops), {lm.eos_token_id}, "test")


def test_pieces_join_into_the_generations_text(lm):
    stream = _stream(lm, _feeding(lm, "The capital of France is Paris.", "The capital of France is Paris."))
    assert repr(stream) == "TokenStream('test')"
    pieces = list(stream)
    assert len(pieces) > 3
    assert "".join(pieces) == "The capital of France is Paris."
    assert stream.generation.finish_reason == "stop"
    assert list(stream) == []  # exhausted


def test_pieces_arrive_while_the_generation_runs(lm):
    first_read = threading.Event()
    waited = []

    def between(i):
        if i == 3:
            waited.append(first_read.wait(10))

    stream = _stream(lm, _feeding(lm, "One two three four five six", "One two three four five six", between=between))
    first = next(stream)
    first_read.set()
    rest = list(stream)
    assert waited == [True]  # the first piece came before the generation went on
    assert first + "".join(rest) == "One two three four five six"


def test_a_stop_string_and_what_follows_are_never_handed_out(lm):
    stream = _stream(lm, _feeding(lm, "Paris.\nQuestion: and Spain?", "Paris."), stops=["\nQuestion:"])
    pieces = list(stream)
    assert "".join(pieces) == "Paris."
    assert not any("\n" in p for p in pieces)  # held back while it might begin the stop string


def test_tokens_after_the_end_of_sequence_are_not_handed_out(lm):
    stream = _stream(lm, _feeding(lm, "Yes.", "Yes.", eos_after=True))
    assert "".join(stream) == "Yes."


def test_the_generation_is_there_only_once_read_to_the_end(lm):
    stream = _stream(lm, _feeding(lm, "Paris is lovely", "Paris is lovely"))
    with pytest.raises(RuntimeError, match="read every piece first"):
        _ = stream.generation
    next(stream)
    with pytest.raises(RuntimeError):
        _ = stream.generation
    list(stream)
    assert stream.generation.text == "Paris is lovely"


def test_an_error_of_the_generation_reaches_the_reader(lm):
    def run(feed):
        feed.put(np.array([[1, 2]]))
        raise RuntimeError("the model failed")

    stream = _stream(lm, run)
    with pytest.raises(RuntimeError, match="the model failed"):
        next(stream)
    with pytest.raises(StopIteration):
        next(stream)


def test_lm_stream_gives_generates_continuation(lm):
    prompt = "What is the capital of France?"
    stream = lm.stream(prompt, max_new_tokens=8)
    pieces = list(stream)
    generated = lm.generate(prompt, max_new_tokens=8)[0]
    assert "".join(pieces) == stream.generation.text == generated.text
    assert stream.generation.token_ids == generated.token_ids
    assert not _held_elsewhere(lm)


def test_lm_stream_with_stop_strings_matches_generate(lm):
    prompt = "List three colours, separated by commas."
    stream = lm.stream(prompt, max_new_tokens=12, stop=[","])
    text = "".join(stream)
    generated = lm.generate(prompt, max_new_tokens=12, stop=[","])[0]
    assert text == generated.text
    assert "," not in text
    assert stream.generation.finish_reason == generated.finish_reason


def test_a_sampled_stream_is_samples_draw(lm):
    prompt = "Say a random word."
    stream = lm.stream(prompt, max_new_tokens=5, temperature=1.2, seed=3)
    text = "".join(stream)
    assert text == lm.sample(prompt, 1, max_new_tokens=5, temperature=1.2, seed=3)[0].text


def test_closing_stops_the_generation_and_frees_the_model(lm):
    stream = lm.stream(LONG, max_new_tokens=300)
    next(stream)
    assert _held_elsewhere(lm)  # still generating
    stream.close()
    assert not _held_elsewhere(lm)
    with pytest.raises(StopIteration):
        next(stream)


def test_leaving_a_with_block_closes_the_stream(lm):
    with lm.stream(LONG, max_new_tokens=300) as stream:
        next(stream)
    assert not _held_elsewhere(lm)


def test_close_from_another_thread_ends_the_reading(lm):
    stream = lm.stream(LONG, max_new_tokens=300)
    next(stream)
    closer = threading.Thread(target=stream.close)
    closer.start()
    closer.join(timeout=60)
    assert not closer.is_alive()
    assert len(list(stream)) < 300
    assert not _held_elsewhere(lm)


def test_stop_ends_the_generation_at_its_next_token(lm):
    stream = lm.stream(LONG, max_new_tokens=300)
    next(stream)
    stream.stop()
    rest = list(stream)  # whatever was queued before the stop, then the end
    assert len(rest) < 50  # far short of the 300 tokens asked for
    with pytest.raises(RuntimeError):
        _ = stream.generation  # a stopped generation never finished
    stream.close()
    assert not _held_elsewhere(lm)


def test_an_unstarted_stream_closes_without_generating(lm):
    stream = lm.stream(LONG, max_new_tokens=300)
    stream.close()
    with pytest.raises(StopIteration):
        next(stream)
    assert not _held_elsewhere(lm)


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"top_logprobs": -1}, "top_logprobs"),
        ({"temperature": 0.7, "top_logprobs": 2}, "greedy"),
        ({"temperature": 0.7, "top_p": 0.0}, "top_p"),
        ({"stop": [""]}, "stop"),
    ],
)
def test_bad_arguments_are_refused_before_generating(lm, kwargs, problem):
    with pytest.raises(ValueError, match=problem):
        lm.stream("Hi", **kwargs)


def test_a_stream_left_unread_runs_to_its_end_and_frees_the_model(lm):
    stream = lm.stream(LONG, max_new_tokens=8)
    first = next(stream)  # started, then left alone
    deadline = time.monotonic() + 60
    while _held_elsewhere(lm) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _held_elsewhere(lm)
    pieces = list(stream)  # what it queued meanwhile is still there
    assert stream.generation.finish_reason in {"length", "eos"}
    assert len(stream.generation.token_ids) <= 8
    assert first + "".join(pieces) == stream.generation.text

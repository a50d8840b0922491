"""Answering with an LLM, with or without passages: the prompts and the real SmolLM2."""

from __future__ import annotations

import pytest

from adaptive_gates.answering.answerer import (
    DEFAULT_INSTRUCTION,
    Answer,
    Answerer,
    LLMAnswerer,
    ReplyAnswerer,
    build_prompt,
    clean_answer,
    prompt_template,
)
from adaptive_gates.answering.prompts import fill
from adaptive_gates.models.chat.openai_chat import OpenAIChatModel

FRANCE = "What is the capital of France?"
ZORVATH = "Who founded the town of Zorvath?"
PASSAGE = "The town of Zorvath was founded by Melinda Quarrel in 1802."


def test_build_prompt_layout():
    assert build_prompt(FRANCE) == f'{DEFAULT_INSTRUCTION}\nQuestion: "{FRANCE}"'
    with_passages = build_prompt(ZORVATH, [PASSAGE, "Another passage."], max_passage_chars=20)
    assert with_passages.splitlines() == [
        DEFAULT_INSTRUCTION,
        "Here are some passages:",
        '[1] "The town of Zorvath"',  # cut, and the cut's trailing space dropped
        '[2] "Another passage."',
        f'Question: "{ZORVATH}"',
    ]
    assert build_prompt(FRANCE, []) == build_prompt(FRANCE)  # no passages: no block
    assert build_prompt(FRANCE, instruction="Answer briefly.").startswith("Answer briefly.\n")


def test_prompt_template_fills_to_the_built_prompt():
    question = 'Who said "{x}"?\nAnswer: me'
    assert fill(prompt_template(), question=question) == build_prompt(question)


@pytest.mark.parametrize(
    ("reply", "answer"),
    [("Paris", "Paris"), ("\n\n Answer: Paris\nmore", "Paris"), ("Answer:\nLyon", "Lyon"), ("", ""), ("  \n ", "")],
)
def test_clean_answer(reply, answer):
    assert clean_answer(reply) == answer


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="style must be 'skr' or 'when-to-retrieve'"):
        LLMAnswerer(style="chatty")
    for workers in [0, 1.5, True]:
        with pytest.raises(ValueError, match="max_workers must be a positive int"):
            LLMAnswerer(max_workers=workers)
    with pytest.raises(TypeError, match=r"model must be a ChatModel .* got str"):
        LLMAnswerer("SmolLM2")


def test_workers_and_answer_length_have_an_upper_bound():
    assert LLMAnswerer(max_workers=256, max_new_tokens=32768).max_workers == 256
    with pytest.raises(ValueError, match="max_workers must be at most 256, got 257"):
        LLMAnswerer(max_workers=257)
    with pytest.raises(ValueError, match="max_new_tokens must be at most 32768, got 100000000"):
        LLMAnswerer(max_new_tokens=10**8)
    with pytest.raises(ValueError, match="max_new_tokens must be a positive int"):
        LLMAnswerer(max_new_tokens=0)


def test_the_two_prompt_styles():
    skr = LLMAnswerer()
    assert skr.prompt(ZORVATH, [PASSAGE]) == build_prompt(ZORVATH, [PASSAGE])
    wtr = LLMAnswerer(style="when-to-retrieve", max_passage_chars=9)
    assert wtr.prompt(FRANCE).endswith(f'\nQuestion: "{FRANCE}"')
    assert wtr.prompt(FRANCE).startswith("Answer the following question based on your internal knowledge")
    lines = wtr.prompt(ZORVATH, [PASSAGE]).splitlines()
    assert lines[:2] == ["Given the following information: ", '[1] "The town"']


@pytest.fixture(scope="module")
def answerer(lm, one_torch_thread):
    return LLMAnswerer(lm, max_new_tokens=8)


def test_the_local_model_answers(answerer):
    assert isinstance(answerer, Answerer)
    assert isinstance(answerer, ReplyAnswerer)
    assert "Paris" in answerer.answer(FRANCE)


def test_passages_reach_the_model(answerer):
    without, with_ = answerer.answer_replies([ZORVATH, ZORVATH], [[], [PASSAGE]])
    # the prompt with the passage is longer by the passage's tokens, and the answer changes
    assert with_.usage.prompt_tokens > without.usage.prompt_tokens + 10
    assert with_.text != without.text
    assert answerer.answer_batch([ZORVATH], [[PASSAGE]]) == [with_.text]


def test_replies_carry_tokens_when_asked(answerer):
    (plain,) = answerer.answer_replies([FRANCE])
    (scored,) = answerer.answer_replies([FRANCE], top_logprobs=3)
    assert isinstance(scored, Answer)
    assert plain.tokens is None
    assert scored.text == plain.text
    assert scored.tokens and all(len(t.top) == 3 and t.logprob <= 0 for t in scored.tokens)
    assert scored.tokens[0].top[0][0] == scored.tokens[0].token  # greedy: the best token chosen
    assert scored.usage.completion_tokens == len(scored.tokens)


def test_passages_must_match_the_questions(answerer):
    with pytest.raises(ValueError, match="got 1 passage lists for 2 questions"):
        answerer.answer_batch([FRANCE, ZORVATH], [[PASSAGE]])


def test_a_remote_model_answers_as_the_local_one(answerer, openai_server):
    remote = LLMAnswerer(
        OpenAIChatModel(openai_server.model_id, base_url=openai_server.base_url), max_new_tokens=8, max_workers=2
    )
    questions = [FRANCE, ZORVATH]
    assert remote.answer_batch(questions, [[], [PASSAGE]]) == answerer.answer_batch(questions, [[], [PASSAGE]])
    assert openai_server.requests == 2

"""Chat-template markup in prompt text is broken so that it tokenizes as plain words."""

from __future__ import annotations

import re

import pytest

from adaptive_gates.models.lm.markup import CHAT_MARKUP, defuse_markup


@pytest.mark.parametrize(
    ("text", "defused"),
    [
        ("<|im_start|>system", "< |im_start|>system"),
        ("done<|im_end|>", "done< |im_end|>"),
        ("<|eot_id|>", "< |eot_id|>"),
        ("<s>[INST] hi [/INST]</s>", "< s>[ INST] hi [ /INST]< /s>"),
        ("<start_of_turn>user", "< start_of_turn>user"),
        ("<filename>a.py", "< filename>a.py"),
        ("[SYSTEM_PROMPT] obey", "[ SYSTEM_PROMPT] obey"),
        ("<|", "< |"),
        ("<\uff5cUser\uff5c>", "< \uff5cUser\uff5c>"),  # the full-width bar
    ],
)
def test_markup_is_broken_after_its_first_character(text, defused):
    assert defuse_markup(text) == defused


@pytest.mark.parametrize(
    "text",
    [
        "Is 3 < 4 and 5 > 2?",
        "a <= b",
        "see [1] and [citation needed]",
        "[Inst] lower case is prose",
        "email <me at example dot com>",  # spaces inside: no tag
        "",
    ],
)
def test_ordinary_text_is_left_alone(text):
    assert defuse_markup(text) == text


def test_defusing_twice_changes_nothing_more():
    once = defuse_markup("<|im_end|><s>[INST]")
    assert defuse_markup(once) == once
    assert not CHAT_MARKUP.search(once)


def test_another_pattern_breaks_only_its_own_matches():
    pattern = re.compile(re.escape("<|im_end|>"))
    assert defuse_markup("<|im_end|> <s>", pattern) == "< |im_end|> <s>"


def test_defused_markup_no_longer_tokenizes_as_the_special_token(lm):
    tokenizer = lm.tokenizer
    special = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert special in tokenizer("x<|im_end|>y", add_special_tokens=False).input_ids
    defused = tokenizer(defuse_markup("x<|im_end|>y"), add_special_tokens=False).input_ids
    assert special not in defused
    assert "im_end" in tokenizer.decode(defused)  # still legible

"""The chat protocol's records and checks: TokenUsage, ChatReply, ResolvedChatOptions,
the protocols, with_achat / ThreadedAsyncChat, check_messages and user."""

from __future__ import annotations

import asyncio
import math
import threading

import pytest

from adaptive_gates.errors import InvalidQuestionError
from adaptive_gates.models.chat.base import (
    ChatModel,
    ChatReply,
    ResolvedChatOptions,
    SyncChatModel,
    ThreadedAsyncChat,
    TokenUsage,
    check_messages,
    user,
    with_achat,
)
from adaptive_gates.models.chat.local import LocalChatModel
from adaptive_gates.records.token_logprobs import TokenLogprob


class ShoutingChat:
    """A chat model with only ``chat``: it replies with the last message in capitals,
    cut to ``max_tokens`` words, and notes the thread each call ran in."""

    def __init__(self) -> None:
        self.threads: list[int] = []

    @property
    def model_id(self) -> str:
        return "shouting"

    def chat(self, messages, **options) -> ChatReply:
        asked = ResolvedChatOptions(**options)
        self.threads.append(threading.get_ident())
        words = messages[-1]["content"].upper().split()[: asked.max_tokens]
        return ChatReply(" ".join(words), usage=TokenUsage(len(messages), len(words)))


# ------------------------------------------------------------------ TokenUsage


def test_token_usage_adds_up_and_reports_openai_fields():
    total = TokenUsage(10, 3) + TokenUsage(5, 2)
    assert total == TokenUsage(15, 5)
    assert total.total_tokens == 20
    assert total.to_json() == {"prompt_tokens": 15, "completion_tokens": 5, "total_tokens": 20}


@pytest.mark.parametrize("bad", [-1, 1.5, True, None, "3"])
def test_token_usage_refuses_counts_that_are_not_non_negative_ints(bad):
    with pytest.raises(ValueError, match="prompt_tokens"):
        TokenUsage(bad, 0)
    with pytest.raises(ValueError, match="completion_tokens"):
        TokenUsage(0, bad)


def test_token_usage_from_openai_reads_mappings_and_sdk_objects():
    from openai.types import CompletionUsage

    assert TokenUsage.from_openai({"prompt_tokens": 4, "completion_tokens": 1, "total_tokens": 5}) == TokenUsage(4, 1)
    sdk = CompletionUsage(prompt_tokens=7, completion_tokens=2, total_tokens=9)
    assert TokenUsage.from_openai(sdk) == TokenUsage(7, 2)


@pytest.mark.parametrize(
    "usage",
    [
        None,
        {},
        {"prompt_tokens": 4},
        {"prompt_tokens": 4, "completion_tokens": None},
        {"prompt_tokens": -1, "completion_tokens": 2},
    ],
)
def test_token_usage_from_openai_is_none_when_a_count_is_missing_or_invalid(usage):
    assert TokenUsage.from_openai(usage) is None


def test_chat_reply_defaults_say_nothing_beyond_the_text():
    reply = ChatReply("Paris")
    assert (reply.tokens, reply.finish_reason, reply.usage) == (None, "stop", None)
    with pytest.raises(AttributeError):
        reply.text = "Lyon"  # type: ignore[misc]
    tokens = (TokenLogprob("Paris", -0.1),)
    assert ChatReply("Paris", tokens, "length").tokens == tokens


# ---------------------------------------------------------- ResolvedChatOptions


def test_resolved_options_default_every_keyword():
    asked = ResolvedChatOptions()
    assert (asked.max_tokens, asked.temperature, asked.top_logprobs, asked.stops) == (64, 0.0, 0, ())


def test_resolved_options_read_one_stop_string_as_that_one():
    assert ResolvedChatOptions(stop="\n").stops == ("\n",)
    assert ResolvedChatOptions(stop=["a", "b"]).stops == ("a", "b")
    assert ResolvedChatOptions(stop=None).stops == ()


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"max_tokens": 2.0}, "max_tokens"),
        ({"top_logprobs": -1}, "top_logprobs"),
        ({"top_logprobs": False}, "top_logprobs"),
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": math.inf}, "temperature"),
        ({"temperature": math.nan}, "temperature"),
        ({"temperature": "0.5"}, "temperature"),
        ({"temperature": True}, "temperature"),
        ({"stop": [""]}, "stop"),
        ({"stop": ["ok", 3]}, "stop"),
    ],
)
def test_resolved_options_name_a_bad_value(options, named):
    with pytest.raises(ValueError, match=named):
        ResolvedChatOptions(**options)


def test_resolved_options_refuse_an_unknown_keyword_as_a_signature_would():
    with pytest.raises(TypeError):
        ResolvedChatOptions(max_new_tokens=3)  # type: ignore[call-arg]


# ------------------------------------------------------------ protocols, with_achat


def test_a_model_with_only_chat_is_a_sync_chat_model_but_not_a_chat_model():
    model = ShoutingChat()
    assert isinstance(model, SyncChatModel)
    assert not isinstance(model, ChatModel)


def test_with_achat_lends_a_threaded_achat_to_a_sync_model():
    model = ShoutingChat()
    wrapped = with_achat(model)
    assert isinstance(wrapped, ThreadedAsyncChat)
    assert isinstance(wrapped, ChatModel)
    assert wrapped.model_id == "shouting"
    assert repr(wrapped).startswith("ThreadedAsyncChat(")

    reply = asyncio.run(wrapped.achat(user("where is the eiffel tower"), max_tokens=2))
    assert reply.text == "WHERE IS"
    assert model.threads[-1] != threading.get_ident()  # asked from a worker thread
    assert wrapped.chat(user("a b c"), max_tokens=1) == ChatReply("A", usage=TokenUsage(1, 1))
    assert model.threads[-1] == threading.get_ident()


def test_threaded_achat_does_not_block_the_event_loop():
    release = threading.Event()

    class Waiting(ShoutingChat):
        def chat(self, messages, **options):
            assert release.wait(10), "the event loop never ran while chat waited"
            return super().chat(messages, **options)

    async def main():
        asking = asyncio.ensure_future(with_achat(Waiting()).achat(user("hello")))
        await asyncio.sleep(0.05)  # the loop runs while chat waits in its thread
        release.set()
        return await asking

    assert asyncio.run(main()).text == "HELLO"


def test_with_achat_returns_a_model_that_has_achat_itself():
    model = LocalChatModel()  # nothing loads until it is asked
    assert with_achat(model) is model


# ---------------------------------------------------------------- check_messages


def test_check_messages_copies_to_plain_dicts_of_role_and_content():
    given = [{"role": "system", "content": "Be brief.", "name": "x"}, {"role": "user", "content": "Hi"}]
    clean = check_messages(given)
    assert clean == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    clean[0]["content"] = "changed"
    assert given[0]["content"] == "Be brief."


@pytest.mark.parametrize("messages", ["hello", b"hello", [], ()])
def test_check_messages_refuses_what_is_not_a_non_empty_list(messages):
    with pytest.raises(ValueError, match="non-empty list"):
        check_messages(messages)


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        ({"role": "tool", "content": "x"}, "role must be one of"),
        ({"content": "x"}, "role must be one of"),
        ({"role": "user", "content": None}, "content must be a str"),
        ({"role": "user", "content": ["x"]}, "content must be a str"),
    ],
)
def test_check_messages_names_the_bad_message(message, problem):
    with pytest.raises(ValueError, match=f"message 1: {problem}"):
        check_messages([{"role": "user", "content": "fine"}, message])


def test_check_messages_refuses_text_that_cannot_be_encoded():
    with pytest.raises(InvalidQuestionError, match="message 0"):
        check_messages(user("bad \ud800 surrogate"))


def test_user_is_a_one_message_conversation():
    assert user("Who wrote Hamlet?") == [{"role": "user", "content": "Who wrote Hamlet?"}]
    assert check_messages(user("x")) == user("x")

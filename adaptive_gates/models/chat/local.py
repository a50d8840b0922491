"""The chat protocol over a local causal LM (the embedded SmolLM2 by default), and the
default chat model of the gates that ask one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Generator, Sequence
from typing import TYPE_CHECKING, Any, Unpack

from .base import (
    ChatModel,
    ChatOptions,
    ChatReply,
    Message,
    ResolvedChatOptions,
    TokenLogprob,
    TokenUsage,
    check_messages,
)
from .stream import ChatChunk

if TYPE_CHECKING:
    from ..lm.generation import Generation
    from ..lm.local import LocalCausalLM
    from ..lm.token_stream import TokenStream


#: Temperatures below this decode greedily.
SAMPLING_EPS = 1e-5


class LocalChatModel:
    """The chat protocol over a ``LocalCausalLM`` (the embedded SmolLM2 by default).

    Greedy replies of a batch are generated together; a temperature of at least
    ``SAMPLING_EPS`` samples (plain temperature sampling, seeded by ``seed`` so runs
    repeat); a smaller one decodes greedily, its limit (as vLLM does: dividing the
    logits by a subnormal temperature overflows them). ``stream`` and
    ``astream`` hand a reply out piece by piece as it is generated (a
    ``StreamingChatModel``): the same reply as ``chat``'s.
    """

    def __init__(self, lm: LocalCausalLM | None = None, *, seed: int = 0, batch_size: int = 8) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if lm is None:
            from ..embedded import embedded_smollm2_gguf

            embedded_smollm2_gguf()  # a missing weight package is said now, not at the first question
        self._lm = lm
        self.seed = seed
        self.batch_size = batch_size

    @property
    def lm(self) -> LocalCausalLM:
        """The wrapped model (the process-wide embedded default when none was given)."""
        if self._lm is None:
            from ..defaults import default_llm

            self._lm = default_llm()
        return self._lm

    @property
    def model_id(self) -> str:
        return self.lm.model_id

    def count_tokens(self, text: str) -> int:
        """The tokens of ``text`` in the model's tokenizer (``LocalCausalLM.count_tokens``)."""
        return self.lm.count_tokens(text)

    def chat(self, messages: Sequence[Message], **options: Unpack[ChatOptions]) -> ChatReply:
        """One assistant reply to ``messages``."""
        return self.chat_batch([messages], **options)[0]

    async def achat(self, messages: Sequence[Message], **options: Unpack[ChatOptions]) -> ChatReply:
        """``chat`` in a worker thread: generation is in-process work that would
        otherwise hold the event loop."""
        return await asyncio.to_thread(self.chat, messages, **options)

    def chat_batch(self, conversations: Sequence[Sequence[Message]], **options: Unpack[ChatOptions]) -> list[ChatReply]:
        """Replies to many conversations; greedy ones are generated ``batch_size`` at a time."""
        asked = ResolvedChatOptions(**options)
        lm = self.lm
        texts = [lm.format_prompt(check_messages(c)) for c in conversations]
        if asked.temperature >= SAMPLING_EPS:
            # Sampling is per prompt.
            sampling = self._sampling(asked.temperature)
            generations = [
                lm.sample(t, 1, max_new_tokens=asked.max_tokens, stop=asked.stops, formatted=True, **sampling)[0]
                for t in texts
            ]
        else:
            generations = []
            for start in range(0, len(texts), self.batch_size):
                generations.extend(
                    lm.generate(
                        texts[start : start + self.batch_size],
                        max_new_tokens=asked.max_tokens,
                        stop=asked.stops,
                        formatted=True,
                        top_logprobs=asked.top_logprobs,
                    )
                )
        return [self._reply(g, asked.top_logprobs) for g in generations]

    def stream(self, messages: Sequence[Message], **options: Unpack[ChatOptions]) -> Generator[ChatChunk, None, None]:
        """``chat``'s reply piece by piece as the model generates it; the last piece holds
        the whole reply. Arguments are checked here; closing the generator stops the
        generation and frees the model."""
        asked = ResolvedChatOptions(**options)
        return self._pieces(self._open(messages, asked), asked.top_logprobs)

    async def astream(
        self, messages: Sequence[Message], **options: Unpack[ChatOptions]
    ) -> AsyncGenerator[ChatChunk, None]:
        """``stream`` for async code: loading, generating and waiting for each piece
        happen in worker threads, so the event loop is never blocked."""
        asked = ResolvedChatOptions(**options)
        tokens = await asyncio.to_thread(self._open, messages, asked)
        try:
            while (text := await asyncio.to_thread(next, tokens, None)) is not None:
                yield ChatChunk(text)
            yield ChatChunk("", self._reply(tokens.generation, asked.top_logprobs))
        finally:
            # The stream, not a generator over it: closing is safe while a thread reads it.
            # Stopped here and now: a cancelled task's next await (the wait for the model
            # to be free) may itself be cancelled before it runs.
            tokens.stop()
            await asyncio.to_thread(tokens.close)

    def _open(self, messages: Sequence[Message], asked: ResolvedChatOptions) -> TokenStream:
        """The model's token stream for one reply, as ``chat`` would generate it."""
        lm = self.lm
        text = lm.format_prompt(check_messages(messages))
        # A sampled reply has no log-probs, as with ``chat``.
        sampled = asked.temperature >= SAMPLING_EPS
        decoding = self._sampling(asked.temperature) if sampled else {"top_logprobs": asked.top_logprobs}
        return lm.stream(text, max_new_tokens=asked.max_tokens, stop=asked.stops, formatted=True, **decoding)

    def _pieces(self, tokens: TokenStream, top_logprobs: int) -> Generator[ChatChunk, None, None]:
        with tokens:
            for text in tokens:
                yield ChatChunk(text)
            yield ChatChunk("", self._reply(tokens.generation, top_logprobs))

    def _sampling(self, temperature: float) -> dict[str, Any]:
        """Plain temperature sampling (top_k=0 / top_p=1 leave the distribution unchanged)."""
        return {"temperature": temperature, "top_k": 0, "top_p": 1.0, "seed": self.seed}

    def _reply(self, generation: Generation, top_logprobs: int) -> ChatReply:
        # Counted by the tokenizer: the prompt as encoded, every token generated (the
        # one that ended generation included, as a server bills it).
        usage = TokenUsage(generation.prompt_tokens, len(generation.token_ids))
        if not top_logprobs or not generation.top_logprobs:
            return ChatReply(generation.text, None, generation.finish_reason, usage)
        decode = self.lm.tokenizer.decode
        tokens = tuple(
            TokenLogprob(
                decode([token_id]),
                logprob,
                tuple((decode([alt]), alt_lp) for alt, alt_lp in top),
            )
            for token_id, logprob, top in zip(generation.token_ids, generation.token_logprobs, generation.top_logprobs)
        )
        return ChatReply(generation.text, tokens, generation.finish_reason, usage)


def chat_model_or_default(chat_model: object | None) -> ChatModel:
    """``chat_model`` once checked to implement ``ChatModel``, or a ``LocalChatModel``
    over the embedded SmolLM2 when it is ``None``; anything else raises ``TypeError``."""
    backend = chat_model if chat_model is not None else LocalChatModel()
    if not isinstance(backend, ChatModel):
        raise TypeError(f"chat_model must implement the core's ChatModel protocol, got {type(backend).__name__}")
    return backend

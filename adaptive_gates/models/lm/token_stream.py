"""One generation handed to its reader as it is produced.

The generation runs in a worker thread that holds the model's lock; transformers gives
each new token to a streamer (``put``), which turns the tokens so far into text and
queues what the next tokens can no longer change. The reader takes the pieces from the
queue, so neither side waits on the other longer than one token.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .generation import Generation, settled_length

log = logging.getLogger(__name__)


class _Closed(Exception):
    """Raised inside the generation once its reader has closed the stream: it ends there."""


@dataclass(frozen=True)
class _Finished:
    """The worker's last word: the finished generation, the error it raised, or ``None``
    when the stream was closed first."""

    outcome: Generation | BaseException | None


class _TokenFeed:
    """transformers' streamer interface (``put``, ``end``): the text of the tokens
    generated so far, queued as it settles."""

    def __init__(
        self,
        decode: Callable[[list[int]], str],
        stops: list[str],
        eos_ids: set[int],
        pieces: queue.SimpleQueue[str | _Finished],
        closed: threading.Event,
    ) -> None:
        self._decode = decode
        self._stops = stops
        self._eos_ids = eos_ids
        self._pieces = pieces
        self._closed = closed
        self._prompt_seen = False
        self._body: list[int] = []  # generated tokens before any end-of-sequence token
        self._ended = False
        self.sent = ""  # the text queued so far

    def put(self, value: Any) -> None:
        if self._closed.is_set():
            raise _Closed
        if not self._prompt_seen:  # generate hands over the prompt's ids first
            self._prompt_seen = True
            return
        if self._ended:
            return
        for token in value.reshape(-1).tolist():
            if token in self._eos_ids:
                self._ended = True
                break
            self._body.append(token)
        text = self._decode(self._body)
        settled = text[: settled_length(text, self._stops)]
        if len(settled) > len(self.sent) and settled.startswith(self.sent):
            self._pieces.put(settled[len(self.sent) :])
            self.sent = settled

    def end(self) -> None:
        """Nothing is held back here: the finished generation decides the last piece."""


class TokenStream(Iterator[str]):
    """The text of one generation, piece by piece as its tokens are generated.

    Joined, the pieces equal the finished ``generation``'s text: stop strings and the
    text after them are never handed out (a piece ending in what may begin a stop string
    waits for the next token), nor are special tokens. ``generation`` (token ids,
    log-probabilities, finish reason) is there once the pieces are exhausted.

    The generation starts on the first ``next`` and runs in a worker thread holding the
    model's lock. ``close()`` (or leaving a ``with`` block) stops it at its next token
    and waits for the thread to end, so the model is free again when it returns; a
    stream left unread runs to its end in the background and frees the model then.
    ``close`` may be called from another thread than the one reading.
    """

    def __init__(
        self,
        run: Callable[[Any], Generation],
        decode: Callable[[list[int]], str],
        stops: list[str],
        eos_ids: set[int],
        name: str,
    ) -> None:
        self._run = run
        self._name = name
        self._pieces: queue.SimpleQueue[str | _Finished] = queue.SimpleQueue()
        self._closed = threading.Event()
        self._feed = _TokenFeed(decode, stops, eos_ids, self._pieces, self._closed)
        self._thread: threading.Thread | None = None
        self._generation: Generation | None = None
        self._done = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._name!r})"

    @property
    def generation(self) -> Generation:
        """The finished generation (its text is every piece joined)."""
        if self._generation is None:
            raise RuntimeError("the stream has not finished: read every piece first")
        return self._generation

    def __iter__(self) -> TokenStream:
        return self

    def __next__(self) -> str:
        if self._done:
            raise StopIteration
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name=f"token stream {self._name}", daemon=True)
            self._thread.start()
        item = self._pieces.get()
        if isinstance(item, str):
            return item
        self._done = True
        if isinstance(item.outcome, BaseException):
            raise item.outcome
        if item.outcome is None:
            raise StopIteration
        self._generation = item.outcome
        rest = self._rest(item.outcome.text)
        if not rest:
            raise StopIteration
        return rest

    def _rest(self, text: str) -> str:
        """What of the finished ``text`` has not been handed out (held back at the end)."""
        sent = self._feed.sent
        if not text.startswith(sent):
            # Decoded prefixes extend one another; a tokenizer that breaks this is reported.
            log.warning("streamed text %r is not the start of the generated text %r", sent, text)
            return ""
        return text[len(sent) :]

    def _work(self) -> None:
        outcome: Generation | BaseException | None
        try:
            outcome = self._run(self._feed)
        except _Closed:
            outcome = None
        except BaseException as exc:  # handed to the reader, which raises it
            outcome = exc
        self._pieces.put(_Finished(outcome))

    def stop(self) -> None:
        """Stop the generation at its next token, without waiting (``close`` waits)."""
        self._closed.set()

    def close(self) -> None:
        """Stop the generation at its next token and wait until the model is free."""
        self.stop()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._done = True

    def __enter__(self) -> TokenStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

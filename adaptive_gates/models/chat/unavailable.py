"""Which exceptions mean a chat backend gave no answer at all (timed out, unreachable),
and which of those mean it timed out.

Gates stop sending the rest of a batch to such a backend (``BackendUnavailableError``),
since each request would wait the same way. Python's own ``TimeoutError`` and
``ConnectionError`` are not what the provider SDKs raise: ``openai``'s
``APITimeoutError`` / ``APIConnectionError`` and the transport errors of ``httpx`` (and
of ``httpx2``, which newer ``openai`` releases use) subclass neither, nor do LangChain's
``ModelTimeoutError`` / ``ModelConnectionError``. Frameworks re-raise
them or wrap them in their own classes, so the whole ``__cause__`` / ``__context__``
chain is read.
"""

from __future__ import annotations

import sys

#: Classes (by module) meaning no answer came. Read from ``sys.modules`` only: an
#: exception of a module's class can exist only once that module is imported, so
#: nothing is imported here.
_NO_ANSWER: dict[str, tuple[str, ...]] = {
    "openai": ("APIConnectionError",),  # APITimeoutError is one too
    "httpx": ("TransportError",),  # timeouts, refused connections, dropped ones
    "httpx2": ("TransportError",),
    # What LangChain's provider packages (other than langchain-openai) raise.
    "langchain_core.exceptions": ("ModelTimeoutError", "ModelConnectionError"),
}
#: The classes among those that mean the request timed out (the server may be up, but slow or hung).
_TIMED_OUT: dict[str, tuple[str, ...]] = {
    "openai": ("APITimeoutError",),
    "httpx": ("TimeoutException",),
    "httpx2": ("TimeoutException",),
    "langchain_core.exceptions": ("ModelTimeoutError",),
}
#: Classes meaning the server did answer, with an HTTP error status. They decide first:
#: a 500 after a retried timeout carries that timeout in its context, yet the server is up.
_ANSWERED: dict[str, tuple[str, ...]] = {
    "openai": ("APIStatusError",),
    "httpx": ("HTTPStatusError",),
    "httpx2": ("HTTPStatusError",),
}


def is_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` says the backend gave no answer: the nearest exception in its
    chain (itself, then its ``__cause__`` or ``__context__``) that is a timeout or a
    connection failure, before any that is an HTTP error reply."""
    return _in_chain(exc, (TimeoutError, ConnectionError, *_loaded(_NO_ANSWER)))


def is_timeout(exc: BaseException) -> bool:
    """Whether ``exc`` says the request timed out: a timeout in its chain, before any
    exception that is an HTTP error reply (a refused connection is no timeout)."""
    return _in_chain(exc, (TimeoutError, *_loaded(_TIMED_OUT)))


def _in_chain(exc: BaseException, wanted: tuple[type[BaseException], ...]) -> bool:
    """Whether an exception of ``wanted`` comes in ``exc``'s chain before any that is
    an HTTP error reply."""
    answered = _loaded(_ANSWERED)
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, answered):
            return False
        if isinstance(current, wanted):
            return True
        current = current.__cause__ or current.__context__
    return False


def _loaded(classes: dict[str, tuple[str, ...]]) -> tuple[type[BaseException], ...]:
    """The named classes of the modules already imported."""
    found = []
    for module_name, names in classes.items():
        module = sys.modules.get(module_name)
        for name in names:
            klass = getattr(module, name, None)
            if isinstance(klass, type) and issubclass(klass, BaseException):
                found.append(klass)
    return tuple(found)

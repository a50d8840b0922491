"""The text of a retrieved snippet, whatever framework produced it.

Retrievers hand back strings or their own document objects; the re-ranker reads the
text through the accessor each framework uses, so their objects go in (and come back
in the results) as they are.
"""

from __future__ import annotations

from typing import Any


def snippet_text(item: Any) -> str:
    """The text of ``item``: a ``str``, or an object's ``page_content`` (LangChain
    ``Document``), ``get_content()`` (LlamaIndex node) or ``text``, in that order.

    Raises:
        TypeError: ``item`` is none of these, or its accessor gives no ``str``.
    """
    if isinstance(item, str):
        return item
    if hasattr(item, "page_content"):
        text, source = item.page_content, "page_content"
    elif callable(getattr(item, "get_content", None)):
        text, source = item.get_content(), "get_content()"
    elif hasattr(item, "text"):
        text, source = item.text, "text"
    else:
        raise TypeError(
            f"a snippet must be a str or have page_content, get_content() or text; got {type(item).__name__}"
        )
    if not isinstance(text, str):
        raise TypeError(f"the snippet's {source} must be a str, got {type(text).__name__} from {type(item).__name__}")
    return text

"""``adaptive-gates serve``: an OpenAI-compatible chat server that retrieves only when
its gate says so (``ChatService``), its HTTP app (``create_app``, in ``app``) and its
chat page. Needs the ``serve`` extra (FastAPI, uvicorn, prometheus-client).

The service is imported when first named, so the command line can read what it needs
of the package (``keys``) without the extra installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .service import ChatService, UpstreamError

__all__ = ["ChatService", "UpstreamError"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import service

        return getattr(service, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

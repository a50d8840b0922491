"""``adaptive-gates serve``: an OpenAI-compatible chat server that retrieves only when
its gate says so (``ChatService``), its HTTP app (``create_app``), the assembly of both
from typed parameters (``build_service``) and its chat page. Needs the ``serve`` extra
(FastAPI, uvicorn, prometheus-client).

Serving from Python::

    from adaptive_gates.serve import build_service, create_app

    app = create_app(build_service(gate="pretrained:draft-check", retriever="bm25"))

The names are imported when first used, so the command line can read what it needs of
the package (``keys``, ``limits``, ``guards``) without the extra installed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..errors import UpstreamError
    from .app import create_app
    from .build import build_service
    from .limits import Limits
    from .service import Answer, AnswerStream, ChatService

__all__ = ["Answer", "AnswerStream", "ChatService", "Limits", "UpstreamError", "build_service", "create_app"]

#: Where each name lives.
_HOMES = {
    "Answer": ".service",
    "AnswerStream": ".service",
    "ChatService": ".service",
    "Limits": ".limits",
    "UpstreamError": "..errors",
    "build_service": ".build",
    "create_app": ".app",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

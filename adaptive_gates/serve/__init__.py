"""``adaptive-gates serve``: an OpenAI-compatible chat server that retrieves only when
its gate says so (``ChatService``), its HTTP app (``create_app``, in ``app``) and its
chat page. Needs the ``serve`` extra (FastAPI, uvicorn, prometheus-client)."""

from .service import ChatService, UpstreamError

__all__ = ["ChatService", "UpstreamError"]

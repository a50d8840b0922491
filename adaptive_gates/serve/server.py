"""uvicorn's server, saying where it listens once it does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import uvicorn


class AnnouncingServer(uvicorn.Server):
    """A ``uvicorn.Server`` that calls ``announce`` with its URL once its socket is bound
    (not before: the port may be taken)."""

    def __init__(self, config: uvicorn.Config, announce: Callable[[str], None]) -> None:
        super().__init__(config)
        self.announce = announce

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        if not self.should_exit:
            host = f"[{self.config.host}]" if ":" in self.config.host else self.config.host
            self.announce(f"http://{host}:{self.config.port}")

"""uvicorn's server, saying where it listens once it does; and the check, before any
model loads, that it will be able to listen there."""

from __future__ import annotations

import contextlib
import socket
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


def check_can_listen(host: str, port: int) -> None:
    """Raise ``OSError`` unless ``host:port`` can be bound now, as uvicorn binds it (every
    address the host name gives, with ``SO_REUSEADDR``): a port another server holds, or
    an address that is not this machine's, fails at once rather than after the models
    have loaded. The sockets are closed again; the server binds its own when it starts."""
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise OSError(f"cannot resolve {host} ({exc.strerror})") from None
    with contextlib.ExitStack() as bound:
        for family, kind, proto, _, address in addresses:
            sock = bound.enter_context(socket.socket(family, kind, proto))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                raise OSError(f"cannot listen on {address[0]} ({exc.strerror or exc})") from None

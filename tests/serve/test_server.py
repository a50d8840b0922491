"""``serve.server``: the check, before any model loads, that the server can listen where
it is asked to, and the server that says where it listens once its socket is bound."""

from __future__ import annotations

import asyncio
import socket

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from adaptive_gates.serve.server import AnnouncingServer, check_can_listen


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_free_port_can_be_listened_on_and_is_left_free() -> None:
    port = _free_port()
    check_can_listen("127.0.0.1", port)
    check_can_listen("127.0.0.1", port)  # the check's own sockets were closed


def test_a_port_another_server_holds_is_refused_at_once() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        with pytest.raises(OSError, match=r"cannot listen on 127\.0\.0\.1"):
            check_can_listen("127.0.0.1", held.getsockname()[1])


def test_a_host_that_does_not_resolve_or_is_not_this_machines_is_refused() -> None:
    with pytest.raises(OSError, match="cannot resolve"):
        check_can_listen("no-such-host.invalid", _free_port())
    with pytest.raises(OSError, match=r"cannot listen on 192\.0\.2\.1"):  # TEST-NET-1: no machine's address
        check_can_listen("192.0.2.1", _free_port())


def test_the_server_announces_its_url_once_it_listens_there() -> None:
    app = Starlette(routes=[Route("/", lambda request: PlainTextResponse("up"))])
    port = _free_port()
    announced: list[str] = []
    server = AnnouncingServer(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"), announced.append)

    async def serve_then_ask() -> bytes:
        task = asyncio.create_task(server.serve())
        while not announced:
            await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        reply = await reader.read()
        writer.close()
        server.should_exit = True
        await task
        return reply

    reply = asyncio.run(serve_then_ask())
    assert announced == [f"http://127.0.0.1:{port}"]
    assert reply.endswith(b"up")


def test_a_server_that_cannot_bind_announces_nothing() -> None:
    app = Starlette()
    announced: list[str] = []
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        config = uvicorn.Config(app, host="127.0.0.1", port=held.getsockname()[1], log_level="critical")
        server = AnnouncingServer(config, announced.append)
        with pytest.raises(SystemExit):
            asyncio.run(server.serve())
    assert announced == []

"""Waiting for a server to come up."""

from __future__ import annotations

import http.server
import socket
import threading
import time

import pytest

from adaptive_gates.serve.health import wait_until_healthy


class _Health(http.server.BaseHTTPRequestHandler):
    healthy_after = 0.0
    started = 0.0

    def do_GET(self):
        ready = self.path == "/healthz" and time.monotonic() - self.started >= self.healthy_after
        self.send_response(200 if ready else 503)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    handler = type("Handler", (_Health,), {"healthy_after": 0.5, "started": time.monotonic()})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_it_returns_once_healthz_answers_200(server):
    start = time.monotonic()
    wait_until_healthy(server, timeout=10, interval=0.05)
    assert time.monotonic() - start >= 0.4  # it waited through the 503s


def test_no_answer_in_time_is_a_timeout():
    url = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(TimeoutError, match=r"was not healthy within 0.3 s"):
        wait_until_healthy(url, timeout=0.3, interval=0.05)


def test_a_process_that_ended_is_reported_at_once():
    url = f"http://127.0.0.1:{_closed_port()}"
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"stopped before it was healthy"):
        wait_until_healthy(url, alive=lambda: False, timeout=30)
    assert time.monotonic() - start < 5

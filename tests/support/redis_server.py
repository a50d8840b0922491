"""A real Redis server for tests: Debian's ``redis-server`` in its own process.

``RedisServer`` starts ``redis-server`` on a free port of 127.0.0.1 (nothing saved to
disk), waits until it answers ``PING``, and stops it; ``start`` again brings it back on
the same port, as a Redis restart would (empty: it keeps nothing on disk). The fixture
``redis_server`` gives a test a server of its own (it starts in milliseconds), and is
skipped, saying why, where ``redis-server`` is not installed (``make redis`` installs it).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

import pytest

from support.milvus_server import free_port
from support.processes import stop

#: How long a server may take to start answering, in seconds.
START_TIMEOUT = 30.0


class RedisServer:
    """One ``redis-server`` process on 127.0.0.1; a context manager."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.directory = Path(directory)
        self.port = port or free_port()
        self._process: subprocess.Popen[bytes] | None = None
        self._log = self.directory / "redis.log"

    @property
    def url(self) -> str:
        """What ``serve --state-url`` is given: database 0 of this server."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        """Start the server and return once it answers ``PING``."""
        if self._process is not None:
            raise RuntimeError(f"the Redis server at {self.url} is running already")
        self.directory.mkdir(parents=True, exist_ok=True)
        command = ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", ""]
        command += ["--appendonly", "no", "--dir", str(self.directory), "--protected-mode", "no"]
        with self._log.open("ab") as out:
            self._process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT
        while not self.answers():
            if self._process.poll() is not None:
                raise RuntimeError(f"the Redis server exited while starting:\n{self._log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the Redis server did not answer on {self.url} in {START_TIMEOUT:.0f} s")
            time.sleep(0.05)
        return self

    def answers(self) -> bool:
        """Whether the server answers ``PING`` (in Redis' own protocol, over a socket)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1.0) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL if it lingers) and wait for it."""
        process, self._process = self._process, None
        if process is None:
            return
        stop(process)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


@pytest.fixture
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A real Redis server of the test's own, stopped after it (a test may stop and start it)."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (Debian's redis-server package; `make redis` installs it)")
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        yield server

"""A real Milvus server for tests: Milvus Lite's gRPC server in its own process.

``MilvusServer`` starts ``milvus-lite server`` on a free port of 127.0.0.1 over a data
directory, waits until a client call succeeds, and stops it; ``restart`` stops it and
starts it again on the same data directory and port, as a database restart would. The
fixture ``milvus_uri`` gives one server's URI to a whole test session (tests keep apart
by collection names); a test that restarts the database starts its own server.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

import pytest

from support.fixture_marks import marks_users
from support.processes import stop

log = logging.getLogger(__name__)

#: How long a server may take to start answering, in seconds.
START_TIMEOUT = 120.0


def free_port() -> int:
    """A TCP port of 127.0.0.1 nothing listens on (once the probe socket is closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class MilvusServer:
    """One ``milvus-lite server`` process over ``data_dir``; a context manager."""

    def __init__(self, data_dir: Path, port: int | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self._process: subprocess.Popen[bytes] | None = None
        self._log = self.data_dir.parent / f"{self.data_dir.name}.log"

    @property
    def uri(self) -> str:
        """The address ``pymilvus.MilvusClient(uri=...)`` connects to."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def _address(self) -> list[str]:
        return ["--host", "127.0.0.1", "--port", str(self.port)]

    def start(self) -> MilvusServer:
        """Start the server and return once a client's call succeeds."""
        if self._process is not None:
            raise RuntimeError(f"the Milvus server at {self.uri} is running already")
        with self._log.open("ab") as out:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "milvus_lite", "server", "--data-dir", str(self.data_dir), *self._address],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self._wait_until_answering()
        log.info("Milvus server at %s over %s", self.uri, self.data_dir)
        return self

    def _wait_until_answering(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not self._answers():
            if self._process is None or self._process.poll() is not None:
                raise RuntimeError(f"the Milvus server exited while starting:\n{self._log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the Milvus server did not answer on {self.uri} in {START_TIMEOUT:.0f} s")
            time.sleep(0.1)

    def _answers(self) -> bool:
        """Whether a client's call succeeds. A server listens a moment before it
        answers; a client of this process that saw it down retries until it does."""
        from pymilvus import MilvusClient, MilvusException

        with socket.socket() as sock:
            sock.settimeout(1.0)
            if sock.connect_ex(("127.0.0.1", self.port)) != 0:
                return False
        try:
            client = MilvusClient(uri=self.uri)
            try:
                client.list_collections()
            finally:
                client.close()
        except MilvusException:
            return False
        return True

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL if it lingers) and wait for it."""
        process, self._process = self._process, None
        if process is None:
            return
        stop(process)

    def restart(self) -> None:
        """Stop the server and start it again over the same data and port."""
        self.stop()
        self.start()

    def __enter__(self) -> MilvusServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


@pytest.fixture(scope="session")
@marks_users("milvus")
def milvus_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URI of a real Milvus (Lite) server process, shared by the session's tests."""
    with MilvusServer(tmp_path_factory.mktemp("milvus") / "data") as server:
        yield server.uri

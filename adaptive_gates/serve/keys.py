"""API keys and what each may do on ``adaptive-gates serve``.

A key has one role, and each role allows what the ones before it do:

- ``chat``: ask (``/v1/chat/completions``, ``/v1/models``);
- ``feedback``: ask, and judge answers (``/v1/feedback``);
- ``admin``: everything, with the figures and the API's description (``/v1/stats``,
  ``/metrics``, ``/docs``, ``/openapi.json``).

The page, its files, ``/healthz`` and ``/readyz`` are public. Keys come from ``--api-key`` and the
``ADAPTIVE_GATES_API_KEY`` variable (admin keys), and from ``--api-key-file`` (a key and
its role a line). The ring keeps only their SHA-256 digests and compares a presented
key with every one of them in constant time, so neither a key nor its position can be
read from timings, and no key is ever in a log or an error.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

ROLES = ("chat", "feedback", "admin")
#: The environment variable holding an admin key.
KEY_VARIABLE = "ADAPTIVE_GATES_API_KEY"
#: Shorter keys are refused: a key is a password a stranger may try to guess.
MIN_KEY_LENGTH = 16


class KeyRing:
    """The server's keys, as digests with their roles; an empty ring asks for no key."""

    def __init__(self, keys: Mapping[str, str] | None = None) -> None:
        self._entries: list[tuple[bytes, str]] = []
        for key, role in (keys or {}).items():
            _check_key(key)
            if role not in ROLES:
                raise ValueError(f"unknown API key role {role!r}: choose one of {', '.join(ROLES)}")
            self._entries.append((_digest(key), role))

    @classmethod
    def from_sources(
        cls,
        keys: Iterable[str] = (),
        key_file: Path | None = None,
        environ: Mapping[str, str] = os.environ,
    ) -> KeyRing:
        """The admin ``keys`` and the environment's, with the roles ``key_file`` gives."""
        roles: dict[str, str] = {}
        admin = list(keys) + ([environ[KEY_VARIABLE]] if environ.get(KEY_VARIABLE) else [])
        for key in admin:
            roles[key] = "admin"
        if key_file is not None:
            for key, role in read_key_file(key_file):
                if roles.get(key, role) != role:
                    raise ValueError(f"{key_file}: a key is given twice, with two roles")
                roles[key] = role
        return cls(roles)

    def __bool__(self) -> bool:
        return bool(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def role_of(self, presented: str) -> str | None:
        """The role of the key ``presented``, or ``None`` when it is none of the ring's."""
        digest = _digest(presented)
        found = None
        for known, role in self._entries:  # every entry compared: the time says nothing
            if hmac.compare_digest(digest, known):
                found = role
        return found


def allows(role: str, needed: str) -> bool:
    """Whether a key of ``role`` may do what ``needed`` allows."""
    return ROLES.index(role) >= ROLES.index(needed)


def read_key_file(path: Path) -> list[tuple[str, str]]:
    """``(key, role)`` pairs of a key file: ``KEY ROLE`` a line; blank lines and lines
    starting with ``#`` are skipped. Errors name the line, never the key."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the API key file {path}: {exc}") from None
    pairs = []
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) != 2 or fields[1] not in ROLES:
            raise ValueError(f"{path}, line {number}: write a key and its role ({', '.join(ROLES)}), one pair a line")
        try:
            _check_key(fields[0])
        except ValueError as exc:
            raise ValueError(f"{path}, line {number}: {exc}") from None
        pairs.append((fields[0], fields[1]))
    return pairs


def key_id(key: str) -> str:
    """A short name of ``key`` that does not reveal it (the start of its digest)."""
    return _digest(key).hex()[:12]


def _check_key(key: object) -> None:
    if not isinstance(key, str) or len(key) < MIN_KEY_LENGTH or not key.isprintable() or " " in key:
        raise ValueError(f"an API key must be at least {MIN_KEY_LENGTH} printable characters without spaces")


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()

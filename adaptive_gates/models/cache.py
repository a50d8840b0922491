"""Where adaptive-gates keeps files it derives once and reuses (e.g. a dequantized model)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """The cache root: ``$ADAPTIVE_GATES_CACHE``, else ``$XDG_CACHE_HOME/adaptive-gates``,
    else ``~/.cache/adaptive-gates``. Not created here; writers create what they need."""
    explicit = os.environ.get("ADAPTIVE_GATES_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "adaptive-gates"

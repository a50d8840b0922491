"""The Python blocks of a README, run as one session: in order, in one namespace, each
using what the blocks before it built (a README that reads as a tutorial)."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: A fenced block of one language, possibly indented under a list item.
BLOCK = r"^(?P<indent> *)```{language}\n(?P<code>.*?)^(?P=indent)```"


def readme_blocks(readme: Path, language: str = "python") -> list[tuple[int, str]]:
    """Each ``language`` block of ``readme`` with the line it starts on."""
    text = readme.read_text(encoding="utf-8")
    found = re.finditer(BLOCK.format(language=re.escape(language)), text, re.M | re.S)
    return [(text.count("\n", 0, m.start()) + 1, textwrap.dedent(m.group("code"))) for m in found]


def run_readme(
    readme: Path,
    namespace: dict[str, Any],
    after_block: Callable[[dict[str, Any]], None] | None = None,
    rewrite: Callable[[str], str | None] | None = None,
) -> int:
    """Run every python block of ``readme`` in ``namespace``, in order; the number run.
    A failing block raises ``AssertionError`` naming its line. ``after_block(namespace)``,
    if given, runs after each block (to adjust what the blocks built, as a test may).
    ``rewrite(code)``, if given, gives the code to run instead (a user's address made this
    run's), or None to leave the block to the test that runs it elsewhere."""
    blocks = readme_blocks(readme)
    if rewrite is not None:
        blocks = [(line, new) for line, code in blocks if (new := rewrite(code)) is not None]
    for line, code in blocks:
        try:
            exec(compile(code, f"{readme.name}:{line}", "exec"), namespace)
        except Exception as exc:
            raise AssertionError(f"the {readme.name} block at line {line} failed: {type(exc).__name__}: {exc}") from exc
        if after_block is not None:
            after_block(namespace)
    return len(blocks)


def reply_cap(max_tokens: int, *names: str) -> Callable[[dict[str, Any]], None]:
    """An ``after_block`` for ``run_readme`` that caps the replies of the README's chat
    models ``names`` (default ``llm``) at ``max_tokens`` once a block has built them (what
    later blocks build on them shares the one object): for a README whose blocks show what
    routes, streams and is recorded, not the answers' words, so a test pays for few
    generated tokens. A model with no cap of its own (``max_tokens`` None) is capped too."""

    def cap(namespace: dict[str, Any]) -> None:
        for name in names or ("llm",):
            model = namespace.get(name)
            if model is not None and (model.max_tokens is None or model.max_tokens > max_tokens):
                model.max_tokens = max_tokens

    return cap

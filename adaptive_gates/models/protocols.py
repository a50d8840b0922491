"""The small protocols a gate needs from its backends.

Anything that satisfies them (a local HF model, an OpenAI-compatible client, a
LangChain or LlamaIndex adapter) can stand behind a gate.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from ..errors import BackendError

if TYPE_CHECKING:
    from .lm.generation import Generation
    from .lm.probe import ProbedSample


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into fixed-size vectors: a sentence encoder for SKR, the query
    representation f(q) for Thrust (``Representer`` is the same protocol).

    ``model_id`` and ``dimension`` are recorded with saved gates so a gate is never
    loaded against a different encoder. An embedder may also offer
    ``settings() -> dict`` (JSON values): what is needed to rebuild it; the built-in
    ones do, so a gate saved with an embedded model loads without arguments.
    """

    @property
    def model_id(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """A float32 array of shape ``(len(texts), dimension)``."""
        ...


@runtime_checkable
class ProbingLM(Protocol):
    """What SeaKR needs from its LM (SPEC §4): sampled answers with the hidden state at
    the EOS closing each, greedy steps with their token log-probs, and the tokenizer
    that maps those tokens back to text. ``LocalCausalLM`` is one.

    On Python < 3.12 ``isinstance`` reads the properties, which may load the model;
    ``check_probing_lm`` checks without reading them.
    """

    @property
    def model_id(self) -> str:
        """Recorded with saved gates and results."""
        ...

    @property
    def tokenizer(self) -> Any:
        """``decode(token_ids, skip_special_tokens=True)`` of the tokens ``generate`` reports."""
        ...

    @property
    def num_layers(self) -> int:
        """Decoder layers; the probe reads ``layer_module_path(i, ...)`` for ``i`` below it."""
        ...

    def generate(
        self,
        prompts: str | Sequence[str],
        *,
        max_new_tokens: int = 32,
        stop: Sequence[str] | None = None,
        formatted: bool = False,
    ) -> list[Generation]:
        """Greedy continuations, cut before the first stop string, with token ids and log-probs."""
        ...

    def sample_with_states(
        self,
        prompt: str,
        k: int = 20,
        *,
        module_path: str,
        temperature: float = 1.0,
        top_k: int = 50,
        top_p: float = 0.9,
        max_new_tokens: int = 100,
        seed: int = 0,
        stop: Sequence[str] | None = None,
        formatted: bool = False,
        first_sample: int = 0,
    ) -> list[ProbedSample]:
        """``k`` seeded samples, each with the output of ``module_path`` at its closing EOS;
        they are samples ``first_sample`` … ``first_sample + k - 1`` of the seed's numbered
        draws, so ``k`` drawn at once equal the same samples drawn in parts."""
        ...

    def prefix_cache(self, size: int = 4) -> AbstractContextManager[None]:
        """A block inside which the KV caches of the ``size`` latest prompts are reused."""
        ...


def check_probing_lm(lm: Any, owner: str) -> None:
    """Raise a ``TypeError`` naming what ``lm`` lacks of ``ProbingLM``, without reading
    its properties (they may load a model)."""
    members = sorted(name for name in vars(ProbingLM) if not name.startswith("_"))
    missing = [name for name in members if inspect.getattr_static(lm, name, _MISSING) is _MISSING]
    if missing:
        raise TypeError(
            f"{owner} needs a probing LM (adaptive_gates.ProbingLM, e.g. LocalCausalLM); "
            f"{type(lm).__name__} lacks {', '.join(missing)}"
        )


_MISSING = object()


def check_vectors(vectors: Any, n: int, source: str) -> np.ndarray:
    """``vectors`` as a finite float32 ``(n, d)`` array, or a ``BackendError`` saying what is wrong."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[0] != n:
        raise BackendError(f"embedder {source!r} returned shape {vectors.shape} for {n} texts")
    if not np.all(np.isfinite(vectors)):
        raise BackendError(f"embedder {source!r} returned NaN or inf")
    return vectors

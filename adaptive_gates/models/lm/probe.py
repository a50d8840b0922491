"""SeaKR's probe (SPEC §4.1) on a loaded causal LM: sampled continuations, each with
the output of one sub-module at the EOS that closes it, from one decoding loop.

``LocalCausalLM.sample_with_states`` calls ``sample_with_states`` here; the loop drives
the LM's own tokenizer, prefix cache and activation capture (``LoadedCausalLM``'s).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import BackendError
from ...records.validation import check_sampling, check_stops
from ..optional import require
from .generation import Generation, first_stop

if TYPE_CHECKING:
    import torch

    from .loaded import LoadedCausalLM


@dataclass(frozen=True)
class ProbedSample:
    """A sampled continuation and what was read from the model while drawing it.

    ``state`` is the output of the probed sub-module at the EOS that closes the sample
    (float32, ``(hidden_size,)``; see ``LocalCausalLM.sample_with_states``).
    ``token_energies`` are ``-logsumexp`` of the raw next-token logits at the step of each
    generated token, aligned with ``generation.token_ids``.
    """

    generation: Generation
    state: np.ndarray
    token_energies: list[float]


def sample_with_states(
    lm: LoadedCausalLM,
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
    """``k`` sampled continuations of one prompt, each with the output of sub-module
    ``module_path`` at an EOS that closes it: SeaKR's probe (SPEC §4.1). EOS replaces
    the token that completed a stop string, an emitted EOS is kept, and an EOS is
    appended after the length cap.

    The draws follow ``lm.sample``'s distribution (temperature, top-k, top-p as in
    transformers) from one decoding loop built for this probe: the prompt is prefilled
    once and its first next-token distribution serves all ``k`` samples; a finished
    sample is fed its EOS in the next step, where its state is read, and then leaves
    the batch. So no step is spent on finished rows and no second pass over prompt +
    samples is needed (on CPU that pass cost as much as the sampling itself).
    Each sample draws from its own random stream, seeded by ``(seed, i)`` for sample
    ``i``, and the samples returned are ``first_sample`` … ``first_sample + k - 1``: so
    k samples drawn in one call equal those drawn in several calls that continue the
    numbering (up to float rounding of the batched forward), and a sample does not
    depend on which others share its batch. Reproducible for a ``seed``, but not the
    same draws as ``lm.sample``.
    """
    torch = require("torch")

    if not isinstance(prompt, str):
        raise ValueError(f"sample_with_states() takes one prompt string, got {type(prompt).__name__}")
    text = lm._prepare(prompt, formatted)[0]
    check_sampling(k, temperature, top_k, top_p, max_new_tokens)
    stops = check_stops(stop)
    if isinstance(first_sample, bool) or not isinstance(first_sample, int) or first_sample < 0:
        raise ValueError(f"first_sample must be an int >= 0, got {first_sample!r}")
    draw = _Sampler(temperature, top_k, top_p, lm.device, [(seed, first_sample + i) for i in range(k)])
    ends = _Ends(lm._eos_ids(), lm.eos_token_id, stops, max_new_tokens, lm._decode)
    drafts = [_Draft() for _ in range(k)]
    with lm.capture(module_path) as captured, torch.inference_mode():
        ids = lm._encode([text], "left", new_tokens=max_new_tokens).input_ids
        cache, logits = _prefill(lm, ids, k)
        states = torch.empty(0)  # the probed outputs of the latest step: none before the first
        rows = list(range(k))  # the draft index of each batch row
        while True:
            keep, feed = _next_tokens(drafts, rows, logits, states, draw, ends)
            if not keep:
                break
            if len(keep) < len(rows):
                cache.batch_select_indices(torch.tensor(keep, device=lm.device))
            rows = [rows[i] for i in keep]
            cache, logits, states = _step(lm, cache, feed, captured, ids.dtype)
    return [d.result(ids.shape[1], ends) for d in drafts]


def _prefill(lm: LoadedCausalLM, ids: torch.Tensor, k: int) -> tuple[Any, torch.Tensor]:
    """The prompt's KV cache repeated for ``k`` rows, and its next-token logits, one row
    per sample. Only the prompt's last token is computed when the prefix cache holds the rest."""
    cache = lm._remembered_kv(ids)
    out = lm.model(
        input_ids=ids if cache is None else ids[:, -1:],
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,
    )
    cache = out.past_key_values
    if not (hasattr(cache, "batch_repeat_interleave") and hasattr(cache, "batch_select_indices")):
        raise BackendError(f"{lm.model_id}: its KV cache cannot be repeated and sliced per sample")
    cache.batch_repeat_interleave(k)
    return cache, out.logits[:, -1].float().expand(k, -1)


def _next_tokens(
    drafts: list[_Draft],
    rows: list[int],
    logits: torch.Tensor,
    states: torch.Tensor,
    draw: _Sampler,
    ends: _Ends,
) -> tuple[list[int], list[int]]:
    """One step's bookkeeping over the batch rows (``rows[i]`` is row i's draft): a row fed
    its closing EOS at the last step has its state read from ``states`` and leaves; the
    others draw from ``logits`` (or, after the length cap, are given EOS). Returns the
    rows that stay and the token each is fed next."""
    sampling = [i for i, r in enumerate(rows) if drafts[r].mode == "sample"]
    drawn = dict(zip(sampling, draw(logits[sampling], [rows[i] for i in sampling]) if sampling else []))
    keep, feed = [], []
    for i, r in enumerate(rows):
        draft = drafts[r]
        if draft.mode == "close":
            draft.state = states[i].numpy().copy()
            continue
        if draft.mode == "last":  # the capped sample's last token is in: close it
            draft.mode, token = "close", ends.eos
        else:
            token = draft.add(*drawn[i], ends)
        keep.append(i)
        feed.append(token)
    return keep, feed


def _step(
    lm: LoadedCausalLM,
    cache: Any,
    feed: list[int],
    captured: list[torch.Tensor],
    dtype: torch.dtype,
) -> tuple[Any, torch.Tensor, torch.Tensor]:
    """Feed one token per row: the extended KV cache, the next-token logits and the
    probed sub-module's output at the fed tokens (``captured`` holds this step's only)."""
    torch = require("torch")

    captured.clear()
    out = lm.model(
        input_ids=torch.tensor(feed, device=lm.device, dtype=dtype)[:, None],
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,
    )
    return out.past_key_values, out.logits[:, -1].float(), captured[-1][:, -1]


@dataclass(frozen=True)
class _Ends:
    """What ends a sample (an EOS id, a stop string, the length cap), the EOS fed to
    close one, and how its tokens read as text."""

    eos_ids: set[int]
    eos: int
    stops: list[str]
    max_new_tokens: int
    decode: Callable[[list[int]], str]


class _Sampler:
    """Draws one token per row like ``generate(do_sample=True, ...)``: temperature, then
    top-k, then top-p. The top-k candidates are gathered first, so the top-p sort and the
    draw run over ``top_k`` values instead of the whole vocabulary (same distribution).
    Each sample has its own generator, seeded by its ``(seed, index)`` pair, so a draw
    does not depend on which other samples share the batch."""

    def __init__(
        self, temperature: float, top_k: int, top_p: float, device: str, streams: list[tuple[int, int]]
    ) -> None:
        torch = require("torch")
        processors = require("transformers.generation.logits_process")

        self.top_k = top_k
        self.warp = processors.LogitsProcessorList()
        if temperature != 1.0:
            self.warp.append(processors.TemperatureLogitsWarper(temperature))
        if top_p < 1.0:
            self.warp.append(processors.TopPLogitsWarper(top_p))
        self.generators = [torch.Generator(device=device).manual_seed(_stream_seed(*s)) for s in streams]

    def __call__(self, logits: torch.Tensor, samples: list[int]) -> list[tuple[int, float, float]]:
        """``(token, logprob, energy)`` per row of raw logits (row i belongs to sample
        ``samples[i]``): the drawn token, its log-probability under the raw distribution
        and ``-logsumexp`` of the logits."""
        torch = require("torch")

        if self.top_k and self.top_k < logits.shape[-1]:
            candidates, index = logits.topk(self.top_k, dim=-1)
        else:
            candidates, index = logits, None
        probs = torch.softmax(self.warp(None, candidates), dim=-1)
        picks = torch.cat(
            [torch.multinomial(row[None], 1, generator=self.generators[i]) for row, i in zip(probs, samples)]
        )
        tokens = picks if index is None else index.gather(1, picks)
        norm = torch.logsumexp(logits, dim=-1)
        logprobs = logits.gather(1, tokens).squeeze(1) - norm
        return list(zip(tokens.squeeze(1).tolist(), logprobs.tolist(), (-norm).tolist()))


def _stream_seed(seed: int, index: int) -> int:
    """A generator seed for sample ``index`` under ``seed``, well spread over 64 bits."""
    return int(np.random.SeedSequence([seed % 2**64, index]).generate_state(1, np.uint64)[0])


class _Draft:
    """One sample being drawn by ``sample_with_states``.

    ``mode`` is what its row is fed next: ``"sample"`` its latest token (then it draws
    another), ``"last"`` its latest token after the length cap (then EOS), ``"close"``
    its closing EOS (whose state is read; then it leaves the batch).
    """

    def __init__(self) -> None:
        self.mode = "sample"
        self.reason = ""
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        self.energies: list[float] = []
        self.state = np.empty(0, dtype=np.float32)  # set when its closing EOS is read

    def add(self, token: int, logprob: float, energy: float, ends: _Ends) -> int:
        """Record a drawn token and return the token its row is fed next."""
        self.tokens.append(token)
        self.logprobs.append(logprob)
        self.energies.append(energy)
        if token in ends.eos_ids:  # an emitted EOS is kept
            self.mode, self.reason = "close", "eos"
        elif ends.stops and first_stop(ends.decode(self.tokens), ends.stops) is not None:
            self.mode, self.reason, token = "close", "stop", ends.eos  # EOS replaces the stop token
        elif len(self.tokens) == ends.max_new_tokens:
            self.mode, self.reason = "last", "length"
        return token

    def result(self, n_prompt: int, ends: _Ends) -> ProbedSample:
        """The finished sample, its text cut like ``generate``'s."""
        body = self.tokens[:-1] if self.reason == "eos" else self.tokens
        text = ends.decode(body)
        if self.reason == "stop":
            text = text[: first_stop(text, ends.stops)]
        generation = Generation(text, self.tokens, self.logprobs, self.reason, n_prompt)
        return ProbedSample(generation, self.state, self.energies)

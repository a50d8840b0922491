"""A local Hugging Face causal LM behind one thread-safe, lazily loaded object.

It offers what the gates need: batched greedy generation, k samples sharing one prompt
prefill, pooled hidden states, activation capture, and token log-probabilities; and,
opt-in, a cache of recent prompts' KV states so that prompts sharing a long start (a
few-shot block) do not recompute it. What the calls share (loading, prompts, tokens,
the prefix cache, activation capture) is the base class's, in ``models.lm.loaded``;
SeaKR's probe (``sample_with_states``) lives in ``models.lm.probe``.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ...records.validation import check_positive, check_sampling, check_stops
from ..optional import require
from . import probe
from .generation import Generation, first_stop
from .loaded import LoadedCausalLM
from .token_stream import TokenStream

if TYPE_CHECKING:
    import torch

_POOLINGS = ("last_token", "mean")
#: Stop-string sets whose StopStringCriteria a model keeps (a client may send any).
_KEPT_STOP_CRITERIA = 32


def layer_module_path(index: int, site: str | None = "mlp") -> str:
    """Sub-module name of ``site`` in decoder layer ``index`` of a LLaMA-like model;
    ``site=None`` names the decoder layer itself (its output is the residual stream)."""
    if index < 0:
        raise ValueError(f"layer index must be >= 0, got {index}")
    return f"model.layers.{index}" if site is None else f"model.layers.{index}.{site}"


class LocalCausalLM(LoadedCausalLM):
    """A causal LM loaded on first use; ``model=None`` means the embedded SmolLM2-135M-Instruct.

    Every inference call holds a per-instance lock, so one instance can be shared by threads.
    Prompts are wrapped in the model's chat template unless ``use_chat_template=False``;
    the text of a message never becomes one of the tokenizer's special tokens (an
    ``<|im_end|>`` in a question is broken to ``< |im_end|>`` before the template).

    ``prefix_cache_size > 0`` keeps the KV caches of that many recent prompts (least
    recently used dropped first); ``prefix_cache(size)`` does the same inside a block. A
    one-prompt ``generate``, ``sample`` or ``sample_with_states`` then computes only the
    tokens after the longest token prefix it shares with a kept prompt. Prompts are
    matched on their token ids rather than on a registered text: a text prefix need not
    tokenize the same alone as inside the prompt (SmolLM2 reads a few-shot block's final
    blank line as one token alone, as two before "Context"), and whole prompts sent twice
    (a greedy step, then the uncertainty of the same prompt) are reused as well. Outputs
    match those without the cache up to float rounding, as the split prefill sums in
    another order (see ``tests/models/lm/test_prefix_cache.py``).
    """

    # -------------------------------------------------------------- generation
    def generate(
        self,
        prompts: str | Sequence[str],
        *,
        max_new_tokens: int = 32,
        stop: Sequence[str] | None = None,
        formatted: bool = False,
        top_logprobs: int = 0,
    ) -> list[Generation]:
        """Greedy continuations of a batch of prompts (left-padded, one ``generate`` call).
        A single prompt goes through the prefix cache when it is on.

        With ``formatted=False`` each prompt is a user message passed through
        ``format_prompt``. Text is cut before the first stop string. ``top_logprobs > 0``
        also records that many most likely tokens at every generated position.
        """
        texts = self._prepare(prompts, formatted)
        check_positive(max_new_tokens, "max_new_tokens")
        stops = check_stops(stop)
        _check_top_logprobs(top_logprobs)
        return self._greedy(texts, max_new_tokens, stops, top_logprobs)

    def _greedy(
        self,
        texts: list[str],
        max_new_tokens: int,
        stops: list[str],
        top_logprobs: int,
        streamer: Any = None,
    ) -> list[Generation]:
        """``generate`` on checked arguments; ``streamer`` is given each new token."""
        torch = require("torch")

        with self._lock, torch.inference_mode():
            enc = self._encode(texts, "left", new_tokens=max_new_tokens)
            cache = self._remembered_kv(enc.input_ids)
            out = self.model.generate(
                input_ids=enc.input_ids,
                attention_mask=enc.attention_mask,
                do_sample=False,
                max_new_tokens=max_new_tokens,
                streamer=streamer,
                **({} if cache is None else {"past_key_values": cache}),
                **self._gen_kwargs(stops),
            )
            lengths = enc.attention_mask.sum(dim=1).tolist()
            return self._collect(out, enc.input_ids.shape[1], lengths, stops, top_logprobs)

    def sample(
        self,
        prompt: str,
        k: int = 20,
        *,
        temperature: float = 1.0,
        top_k: int = 50,
        top_p: float = 0.9,
        max_new_tokens: int = 100,
        seed: int = 0,
        stop: Sequence[str] | None = None,
        formatted: bool = False,
    ) -> list[Generation]:
        """``k`` sampled continuations of one prompt, reproducible for a given ``seed``.

        The prompt is prefilled once and its KV cache repeated ``k`` times, so a long prompt
        costs one forward pass instead of ``k``. The global torch RNG is left untouched.
        """
        if not isinstance(prompt, str):
            raise ValueError(f"sample() takes one prompt string, got {type(prompt).__name__}")
        text = self._prepare(prompt, formatted)[0]
        check_sampling(k, temperature, top_k, top_p, max_new_tokens)
        stops = check_stops(stop)
        sampling = dict(temperature=temperature, top_k=top_k, top_p=top_p)
        return self._sampled(text, k, sampling, max_new_tokens, seed, stops)

    def _sampled(
        self,
        text: str,
        k: int,
        sampling: dict[str, Any],
        max_new_tokens: int,
        seed: int,
        stops: list[str],
        streamer: Any = None,
    ) -> list[Generation]:
        """``sample`` on checked arguments (``sampling``: temperature, top_k, top_p);
        ``streamer`` is given each new token."""
        torch = require("torch")

        with self._lock, torch.inference_mode(), torch.random.fork_rng(devices=[]):
            kwargs = dict(
                do_sample=True,
                max_new_tokens=max_new_tokens,
                streamer=streamer,
                **sampling,
                **self._gen_kwargs(stops),
            )
            torch.manual_seed(seed)
            ids = self._encode([text], "left", new_tokens=max_new_tokens).input_ids
            cache = self._shared_prefix_cache(ids, k)
            if cache is None:
                out = self.model.generate(
                    input_ids=ids,
                    attention_mask=torch.ones_like(ids),
                    num_return_sequences=k,
                    **kwargs,
                )
            else:
                batch = ids.repeat(k, 1)
                out = self.model.generate(
                    input_ids=batch,
                    attention_mask=torch.ones_like(batch),
                    past_key_values=cache,
                    **kwargs,
                )
            return self._collect(out, ids.shape[1], [ids.shape[1]] * k, stops)

    def stream(
        self,
        prompt: str,
        *,
        max_new_tokens: int = 32,
        stop: Sequence[str] | None = None,
        formatted: bool = False,
        top_logprobs: int = 0,
        temperature: float = 0.0,
        top_k: int = 50,
        top_p: float = 0.9,
        seed: int = 0,
    ) -> TokenStream:
        """One continuation of ``prompt``, as text pieces while it is generated.

        ``temperature=0`` decodes greedily, as ``generate`` (same tokens, same text);
        ``temperature > 0`` samples, as ``sample(prompt, 1, ...)`` with the same seed.
        Joined, the pieces are the ``Generation``'s text, which the stream holds once
        read to its end (see ``TokenStream``). ``top_logprobs`` needs greedy decoding.
        Arguments are checked here; generation starts on the first piece asked for, in
        a worker thread that takes the model's lock: a thread inside ``capture()`` on
        this model, which holds that lock, cannot read the stream.
        """
        if not isinstance(prompt, str):
            raise ValueError(f"stream() takes one prompt string, got {type(prompt).__name__}")
        text = self._prepare(prompt, formatted)[0]
        stops = check_stops(stop)
        _check_top_logprobs(top_logprobs)
        run: Callable[[Any], Generation]
        if temperature == 0:
            check_positive(max_new_tokens, "max_new_tokens")

            def run(streamer: Any) -> Generation:
                return self._greedy([text], max_new_tokens, stops, top_logprobs, streamer)[0]

        else:
            check_sampling(1, temperature, top_k, top_p, max_new_tokens)
            if top_logprobs:
                raise ValueError("top_logprobs needs greedy decoding (temperature=0)")
            sampling = dict(temperature=temperature, top_k=top_k, top_p=top_p)

            def run(streamer: Any) -> Generation:
                return self._sampled(text, 1, sampling, max_new_tokens, seed, stops, streamer)[0]

        return TokenStream(run, self._decode, stops, self._eos_ids(), self.model_id)

    #: SeaKR's probe, written in ``models.lm.probe`` and bound here as a method.
    sample_with_states = probe.sample_with_states

    def _shared_prefix_cache(self, ids: torch.Tensor, k: int) -> Any:
        """KV cache of all prompt tokens but the last, repeated ``k`` times along the batch
        (``generate`` then feeds only the last token); ``None`` when it cannot be shared.

        Verified on transformers 5.23: with the same seed this yields exactly the samples of
        ``num_return_sequences=k`` and took 7.8 s instead of 31 s
        for a 640-token prompt, k=20, 20 new tokens (2 CPU cores).
        """
        if ids.shape[1] < 2:
            return None
        cache = self._remembered_kv(ids)
        if cache is None:
            # The base model skips the LM head: the prefix logits are not needed.
            cache = self.model.base_model(input_ids=ids[:, :-1], use_cache=True).past_key_values
        if not hasattr(cache, "batch_repeat_interleave"):
            return None
        cache.batch_repeat_interleave(k)
        return cache

    def _gen_kwargs(self, stops: list[str]) -> dict[str, Any]:
        """``generate`` arguments shared by greedy and sampled decoding. The stop strings
        end each sequence, and the batch, early."""
        kwargs: dict[str, Any] = dict(
            return_dict_in_generate=True,
            output_logits=True,
            pad_token_id=self.tokenizer.pad_token_id,
        )
        if stops:
            kwargs.update(stopping_criteria=require("transformers").StoppingCriteriaList([self._stop_criterion(stops)]))
        return kwargs

    def _stop_criterion(self, stops: list[str]) -> Any:
        """transformers' StopStringCriteria for ``stops``, built once per set of stop
        strings: building it reads the whole vocabulary (about 0.06 s with SmolLM2's),
        which ``generate(stop_strings=...)`` would pay on every call."""
        key = tuple(stops)
        criterion = self._stop_criteria.pop(key, None)
        if criterion is None:
            transformers = require("transformers")
            criterion = transformers.StopStringCriteria(self.tokenizer, list(stops))
            while len(self._stop_criteria) >= _KEPT_STOP_CRITERIA:  # stops may come from clients: bounded
                del self._stop_criteria[next(iter(self._stop_criteria))]
        self._stop_criteria[key] = criterion  # re-inserted: the least recently used goes first
        return criterion

    def _collect(
        self,
        out: Any,
        prompt_width: int,
        prompt_lengths: list[int],
        stops: list[str],
        top_logprobs: int = 0,
    ) -> list[Generation]:
        """Turn a ``generate`` output into ``Generation``s (cut at EOS / stop strings)."""
        torch = require("torch")

        new = out.sequences[:, prompt_width:]
        steps = [torch.log_softmax(step.float(), dim=-1) for step in out.logits]
        logprobs = torch.stack([step.gather(1, new[:, t : t + 1]).squeeze(1) for t, step in enumerate(steps)], dim=1)
        tops: list[list[list[tuple[int, float]]]] = [[] for _ in range(new.shape[0])]
        if top_logprobs:
            for step in steps:
                values, ids = step.topk(top_logprobs, dim=-1)
                for row, (v, i) in enumerate(zip(values.tolist(), ids.tolist())):
                    tops[row].append(list(zip(i, v)))
        eos_ids = self._eos_ids()
        return [
            self._finish(row, lps, n_prompt, stops, eos_ids, top)
            for row, lps, n_prompt, top in zip(new.tolist(), logprobs.tolist(), prompt_lengths, tops)
        ]

    def _finish(
        self,
        row: list[int],
        lps: list[float],
        n_prompt: int,
        stops: list[str],
        eos_ids: set[int],
        top: list[list[tuple[int, float]]],
    ) -> Generation:
        end = next((i for i, tok in enumerate(row) if tok in eos_ids), None)
        body = row if end is None else row[:end]
        text = self._decode(body)
        cut = first_stop(text, stops)
        if cut is not None:
            # Fewest tokens whose text contains a stop string: the stopping token is the last.
            n = 1 + bisect.bisect_left(
                range(1, len(body) + 1),
                True,
                key=lambda m: first_stop(self._decode(body[:m]), stops) is not None,
            )
            return Generation(text[:cut], row[:n], lps[:n], "stop", n_prompt, top[:n])
        if end is not None:
            return Generation(text, row[: end + 1], lps[: end + 1], "eos", n_prompt, top[: end + 1])
        return Generation(text, row, lps, "length", n_prompt, top)

    # ------------------------------------------------------- internals access
    def hidden_states(
        self,
        texts: Sequence[str],
        *,
        layers: Sequence[int] | None = None,
        pooling: str = "last_token",
        max_length: int = 512,
        batch_size: int = 16,
        formatted: bool = True,
    ) -> np.ndarray:
        """Pooled hidden states, float32 ``(len(texts), len(layers), hidden_size)``.

        ``layers`` index the ``output_hidden_states`` tuple (0 = embeddings, ``num_layers``
        = last layer, negatives allowed; default ``[-1]``). ``pooling`` is ``"last_token"``
        (last non-pad token) or ``"mean"`` (over non-pad tokens). Texts are used raw unless
        ``formatted=False`` (then chat-templated) and truncated to ``max_length`` tokens.
        """
        torch = require("torch")

        prepared = self._prepare(texts, formatted)
        if pooling not in _POOLINGS:
            raise ValueError(f"pooling must be one of {_POOLINGS}, got {pooling!r}")
        check_positive(batch_size, "batch_size")
        check_positive(max_length, "max_length")
        selected = [-1] if layers is None else list(layers)
        n_states = self.num_layers + 1
        if not selected or any(not -n_states <= i < n_states for i in selected):
            raise ValueError(f"layers must be non-empty indices in [{-n_states}, {n_states - 1}]")
        chunks = []
        with self._lock, torch.inference_mode():
            for start in range(0, len(prepared), batch_size):
                enc = self._encode(prepared[start : start + batch_size], "right", max_length)
                # The base model: hidden states without computing vocabulary logits.
                out = self.model.base_model(
                    input_ids=enc.input_ids,
                    attention_mask=enc.attention_mask,
                    output_hidden_states=True,
                )
                states = torch.stack([out.hidden_states[i] for i in selected], dim=1)
                chunks.append(_pool(states.float(), enc.attention_mask, pooling).cpu().numpy())
        return np.concatenate(chunks).astype(np.float32, copy=False)

    def forward(self, input_ids: Any, attention_mask: Any = None) -> torch.Tensor:
        """Logits ``(batch, seq, vocab)`` of one plain forward pass over token ids
        (a 1-D or 2-D tensor/list; pad on the right so positions stay correct)."""
        torch = require("torch")

        with self._lock, torch.inference_mode():
            ids = torch.as_tensor(input_ids, device=self.device)
            if ids.ndim == 1:
                ids = ids.unsqueeze(0)
            self.check_window(ids.shape[1])
            mask = None
            if attention_mask is not None:
                mask = torch.as_tensor(attention_mask, device=self.device).reshape(ids.shape)
            return self.model(input_ids=ids, attention_mask=mask).logits.float()

    def token_logprobs(self, prompt: str, continuation: str, formatted: bool = True) -> list[float]:
        """Log-probability of each token of ``continuation`` given ``prompt`` (raw unless
        ``formatted=False``). Prompt and continuation are tokenized separately, so the
        split between them is exactly where the caller put it."""
        torch = require("torch")

        text = self._prepare(prompt, formatted)[0]
        if not isinstance(continuation, str):
            raise ValueError(f"continuation must be a str, got {type(continuation).__name__}")
        with self._lock:  # a fast tokenizer must not be used by two threads at once
            prompt_ids = self._encode([text], "right").input_ids[0].tolist()
            cont_ids = self.tokenizer(continuation, add_special_tokens=False).input_ids
            if not cont_ids:
                return []
            logits = self.forward([prompt_ids + cont_ids])[0, len(prompt_ids) - 1 : -1]
        target = torch.tensor(cont_ids, device=logits.device).unsqueeze(1)
        return torch.log_softmax(logits, dim=-1).gather(1, target).squeeze(1).tolist()


def _check_top_logprobs(top_logprobs: object) -> None:
    if not isinstance(top_logprobs, int) or top_logprobs < 0:
        raise ValueError(f"top_logprobs must be an int >= 0, got {top_logprobs!r}")


def _pool(states: torch.Tensor, mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """``(B, layers, T, H)`` -> ``(B, layers, H)``, ignoring padding on either side."""
    torch = require("torch")

    if pooling == "mean":
        weights = mask.to(states.dtype)[:, None, :, None]
        return (states * weights).sum(dim=2) / weights.sum(dim=2).clamp(min=1)
    last = mask.shape[1] - 1 - mask.flip(1).argmax(dim=1)  # last real token, any padding side
    return states[torch.arange(states.shape[0], device=states.device), :, last]

"""A Hugging Face causal LM loaded on first use, and what every call on it shares.

``LoadedCausalLM`` loads the model and tokenizer, formats and encodes prompts, decodes
tokens, keeps the prompt-prefix cache and captures a sub-module's activations; the
inference calls built on these (generation, sampling, SeaKR's probe, hidden states,
log-probabilities) are ``LocalCausalLM``'s, in ``models.lm.local`` and ``models.lm.probe``.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import re
import threading
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ...errors import BackendError, ContextLengthExceededError, MissingExtraError, MissingModelPackageError
from ...records.validation import check_positive, check_text
from .. import embedded
from ..optional import require
from .markup import defuse_markup
from .prefix_cache import PromptPrefixes

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

_DTYPES = ("float32", "float16", "bfloat16")


def special_token_pattern(tokenizer: Any) -> re.Pattern[str] | None:
    """The tokenizer's special tokens (role markers, end of turn, ...) as one pattern,
    longest first; ``None`` when it has none."""
    added = getattr(tokenizer, "added_tokens_decoder", {}).values()
    tokens = {*tokenizer.all_special_tokens, *(t.content for t in added if getattr(t, "special", True))}
    tokens.discard("")
    if not tokens:
        return None
    return re.compile("|".join(re.escape(t) for t in sorted(tokens, key=len, reverse=True)))


class LoadedCausalLM:
    """A causal LM loaded on first use (``model=None``: the embedded SmolLM2-135M-Instruct),
    with its prompts, tokens, prefix cache and activation capture; ``LocalCausalLM``
    documents the arguments and adds the inference calls, each holding ``_lock``."""

    def __init__(
        self,
        model: str | None = None,
        *,
        device: str = "cpu",
        torch_dtype: str = "float32",
        use_chat_template: bool = True,
        prefix_cache_size: int = 0,
    ) -> None:
        if torch_dtype not in _DTYPES:
            raise ValueError(f"torch_dtype must be one of {_DTYPES}, got {torch_dtype!r}")
        if isinstance(prefix_cache_size, bool) or not isinstance(prefix_cache_size, int) or prefix_cache_size < 0:
            raise ValueError(f"prefix_cache_size must be an int >= 0 (0 = off), got {prefix_cache_size!r}")
        if model is None:
            embedded.embedded_smollm2_gguf()  # a missing weight package is said now, not at the first question
        self._name = model
        self.device = device
        self.torch_dtype = torch_dtype
        self.use_chat_template = use_chat_template
        self._prefix_cache_size = prefix_cache_size
        self._lock = threading.RLock()
        self._tokenizer: Any = None
        self._special_tokens: re.Pattern[str] | None = None
        self._model: Any = None
        self._prefix_scopes: list[int] = []  # the sizes of the open prefix_cache() blocks
        self._prefixes = PromptPrefixes(prefix_cache_size) if prefix_cache_size else None
        self._counting_lock = threading.Lock()
        self._counting_tokenizer: Any = None
        self._stop_criteria: dict[tuple[str, ...], Any] = {}

    # ----------------------------------------------------------------- loading
    @property
    def prefix_cache_size(self) -> int:
        """How many recent prompts' KV caches are kept outside ``prefix_cache`` blocks (0 = none)."""
        return self._prefix_cache_size

    @property
    def model_id(self) -> str:
        """Stable identifier recorded with results: the HF id/path, or the embedded model's name."""
        return embedded.SMOLLM2_ID if self._name is None else self._name

    @property
    def tokenizer(self) -> Any:
        """The HF tokenizer (loads the model on first access)."""
        self._ensure_loaded()
        return self._tokenizer

    @property
    def model(self) -> Any:
        """The HF ``PreTrainedModel`` in eval mode (loads it on first access)."""
        self._ensure_loaded()
        return self._model

    @property
    def num_layers(self) -> int:
        """Number of decoder layers (``hidden_states`` has ``num_layers + 1`` entries)."""
        return int(self.model.config.get_text_config().num_hidden_layers)

    @property
    def hidden_size(self) -> int:
        """Width of the residual stream."""
        return int(self.model.config.get_text_config().hidden_size)

    @property
    def context_window(self) -> int | None:
        """The most tokens the model reads at once, prompt and generated together (its
        ``max_position_embeddings``; 8,192 for SmolLM2); ``None`` when its config has none."""
        window = getattr(self.model.config.get_text_config(), "max_position_embeddings", None)
        return int(window) if window else None

    def check_window(self, prompt_tokens: int, new_tokens: int = 0) -> None:
        """Raise ``ContextLengthExceededError`` when ``prompt_tokens`` and ``new_tokens``
        more do not fit the context window."""
        window = self.context_window
        if window is not None and prompt_tokens + new_tokens > window:
            raise ContextLengthExceededError(self.model_id, prompt_tokens, new_tokens, window)

    @property
    def eos_token_id(self) -> int:
        """The tokenizer's end-of-sequence id."""
        return int(self.tokenizer.eos_token_id)

    def _ensure_loaded(self) -> None:
        if self._model is None:
            with self._lock:
                if self._model is None:
                    self._load()

    def _load(self) -> None:
        start = time.perf_counter()
        # outside the try: a missing extra is not a load failure
        torch = require("torch", needed_for=type(self).__name__)
        transformers = require("transformers", needed_for=type(self).__name__)
        try:
            dtype = getattr(torch, self.torch_dtype)
            if self._name is None:
                tokenizer, model = embedded.load_embedded_smollm2()
            else:
                tokenizer = transformers.AutoTokenizer.from_pretrained(self._name)
                model = transformers.AutoModelForCausalLM.from_pretrained(self._name, dtype=dtype)
            model.to(device=self.device, dtype=dtype).eval()
        except (MissingExtraError, MissingModelPackageError):
            raise  # gguf, needed only to build the embedded model's first copy
        except Exception as exc:
            raise BackendError(f"could not load language model {self.model_id!r}: {exc}") from exc
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self._tokenizer = tokenizer
        self._special_tokens = special_token_pattern(tokenizer)
        self._model = model  # assigned last: it is the "loaded" flag
        log.info("loaded %s on %s in %.1f s", self.model_id, self.device, time.perf_counter() - start)

    # ------------------------------------------------------------ prefix cache
    @contextlib.contextmanager
    def prefix_cache(self, size: int = 4) -> Iterator[None]:
        """Keep the KV caches of the ``size`` most recent prompts inside the block (see the
        class docstring), for a caller that does not own this instance. Open blocks, from
        any thread, share one cache of the largest size asked (or ``prefix_cache_size``);
        what exceeds ``prefix_cache_size`` is freed when the last block closes."""
        check_positive(size, "size")
        with self._lock:
            self._prefix_scopes.append(size)
            self._resize_prefixes()
        try:
            yield
        finally:
            with self._lock:
                self._prefix_scopes.remove(size)
                self._resize_prefixes()

    def _resize_prefixes(self) -> None:
        size = max([self._prefix_cache_size, *self._prefix_scopes])
        if not size:
            self._prefixes = None
        elif self._prefixes is None:
            self._prefixes = PromptPrefixes(size)
        else:
            self._prefixes.resize(size)

    def _remembered_kv(self, ids: torch.Tensor) -> Any:
        """``PromptPrefixes.remember`` on this model; ``None`` when the prefix cache is off."""
        return None if self._prefixes is None else self._prefixes.remember(self.model.base_model, ids)

    # ----------------------------------------------------------------- prompts
    def format_prompt(self, prompt: str | list[dict], system: str | None = None) -> str:
        """A user message (or a messages list) as the chat-templated string ending with the
        assistant's generation prompt; the raw text when ``use_chat_template=False`` or no template exists.

        The tokenizer's special tokens written inside a message are broken
        (``markup.defuse_markup``): only the template's own markup tokenizes as them, so
        a message cannot open another role's turn or end its own."""
        if isinstance(prompt, str):
            check_text(prompt, "prompt")
            messages = [{"role": "user", "content": prompt}]
        else:
            messages = list(prompt)
            if not messages:
                raise ValueError("the messages list must not be empty")
        if system is not None:
            messages = [{"role": "system", "content": system}, *messages]
        tokenizer = self.tokenizer
        if self._special_tokens is not None:
            messages = [
                {**m, "content": defuse_markup(m["content"], self._special_tokens)}
                if isinstance(m.get("content"), str)
                else m
                for m in messages
            ]
        if self.use_chat_template and tokenizer.chat_template:
            return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return "\n\n".join(str(m["content"]) for m in messages)

    def count_tokens(self, text: str) -> int:
        """The tokens of ``text`` as a message's content (no special tokens). Counted on a
        copy of the tokenizer, so a count never waits for a generation holding the model,
        nor shares a tokenizer with one (a fast tokenizer serves one thread at a time)."""
        with self._counting_lock:
            if self._counting_tokenizer is None:
                self._counting_tokenizer = copy.deepcopy(self.tokenizer)
            return len(self._counting_tokenizer(text, add_special_tokens=False).input_ids)

    def _prepare(self, prompts: str | Sequence[str], formatted: bool) -> list[str]:
        """Validated prompt strings, chat-templated unless ``formatted``."""
        texts = [prompts] if isinstance(prompts, str) else list(prompts)
        if not texts:
            raise ValueError("expected at least one prompt, got an empty list")
        for i, text in enumerate(texts):
            check_text(text, f"prompt {i}")
        return texts if formatted else [self.format_prompt(t) for t in texts]

    def _encode(self, texts: list[str], padding_side: str, max_length: int | None = None, new_tokens: int = 0) -> Any:
        """Tokenize a padded batch on the model's device. Special tokens are added unless
        every text already starts with BOS (chat templates usually include it). Without
        ``max_length`` (no truncation), the batch and ``new_tokens`` more must fit the
        context window (``check_window``), checked before the tensors are built."""
        tokenizer = self.tokenizer
        bos = tokenizer.bos_token
        add_special = not (bos and all(t.startswith(bos) for t in texts))
        if max_length is None:
            lengths = tokenizer(texts, add_special_tokens=add_special, return_length=True)["length"]
            self.check_window(max(lengths), new_tokens)
        return tokenizer(
            texts,
            return_tensors="pt",
            padding=True,
            padding_side=padding_side,
            add_special_tokens=add_special,
            truncation=max_length is not None,
            max_length=max_length,
        ).to(self.device)

    def _decode(self, ids: list[int]) -> str:
        """The text of token ids, special tokens left out."""
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def _eos_ids(self) -> set[int]:
        """Every id that ends a generation: the generation config's and the tokenizer's EOS."""
        configured = self.model.generation_config.eos_token_id
        ids = set(configured if isinstance(configured, list) else [configured])
        ids.add(self.tokenizer.eos_token_id)
        ids.discard(None)
        return ids

    # ------------------------------------------------------- activation capture
    @contextlib.contextmanager
    def capture(self, module_path: str) -> Iterator[list[torch.Tensor]]:
        """Record the output of sub-module ``module_path`` (e.g. ``"model.layers.15.mlp"``)
        on every forward call inside the block, as detached float32 CPU tensors (the first
        element when the module returns a tuple). Holds the instance lock for the whole
        block so other threads' calls are not recorded; the hook is removed on exit."""
        try:
            module = self.model.get_submodule(module_path)
        except AttributeError as exc:
            raise ValueError(f"{self.model_id} has no sub-module {module_path!r}") from exc
        outputs: list[torch.Tensor] = []

        def hook(_module: Any, _inputs: Any, output: Any) -> None:
            tensor = output[0] if isinstance(output, tuple) else output
            outputs.append(tensor.detach().float().cpu())

        with self._lock:
            handle = module.register_forward_hook(hook)
            try:
                yield outputs
            finally:
                handle.remove()

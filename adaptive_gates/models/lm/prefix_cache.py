"""The prompt-prefix cache of ``LocalCausalLM``: KV states of recent prompts, reused by
prompts that start with the same tokens (a few-shot block, a prompt sent twice)."""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Number of leading items ``a`` and ``b`` share."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


class PromptPrefixes:
    """The KV caches of the last ``size`` prompts, keyed by their token ids (least recently
    used dropped first). Entries are private deep copies, and so is every cache handed
    out: ``generate`` and the sampling loops extend and slice the caches they are given."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[tuple[int, ...], Any] = OrderedDict()

    def resize(self, size: int) -> None:
        """Keep at most ``size`` entries from now on, dropping the least recently used."""
        self.size = size
        while len(self._entries) > size:
            self._entries.popitem(last=False)

    def longest(self, ids: list[int]) -> tuple[Any, int]:
        """A copy of the cache of the longest kept token prefix of ``ids`` and its length;
        ``(None, 0)`` when no kept prompt starts like ``ids``."""
        key, shared = max(
            ((k, _common_prefix(k, ids)) for k in self._entries), key=lambda entry: entry[1], default=((), 0)
        )
        if not shared:
            return None, 0
        self._entries.move_to_end(key)
        cache = copy.deepcopy(self._entries[key])
        cache.crop(shared - len(key))  # a negative count drops that many tokens
        return cache, shared

    def add(self, ids: list[int], cache: Any) -> None:
        """Keep a copy of ``cache``, the KV states of ``ids``; a cache that cannot be cut
        back to a shorter prefix (sliding-window or recurrent layers) is not kept."""
        key = tuple(ids)
        if key not in self._entries:
            if not getattr(cache, "is_croppable", False):
                return
            self._entries[key] = copy.deepcopy(cache)
        self._entries.move_to_end(key)
        self.resize(self.size)

    def remember(self, base_model: Any, ids: torch.Tensor) -> Any:
        """KV cache of all tokens of a one-row prompt but the last, built by ``base_model``
        on the longest token prefix it shares with a kept prompt, then kept itself;
        ``None`` for a batch or a one-token prompt. The caller owns the returned cache
        (``generate`` extends it in place)."""
        if ids.shape[0] != 1 or ids.shape[1] < 2:
            return None
        head = ids[0, :-1].tolist()
        cache, shared = self.longest(head)
        if shared < len(head):
            # The base model skips the LM head: the prefix logits are not needed.
            cache = base_model(input_ids=ids[:, shared:-1], past_key_values=cache, use_cache=True).past_key_values
        self.add(head, cache)
        return cache

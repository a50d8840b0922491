"""The settings of ``SeaKRRerank``'s core re-ranker as JSON, so a re-ranker saved with
``to_dict`` / ``to_json`` comes back sampling as it did, and its defaults.

The estimator's model is not written: the settings name the embedded SmolLM2, the one
model JSON can name. A re-ranker probing a model given as an object (or built from a
subclass, whose behaviour JSON cannot carry) refuses to serialise, rather than coming
back as another one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adaptive_gates import SelfAwareUncertainty, UncertaintyReranker
from adaptive_gates.models import default_llm

#: The sampling of the default re-ranker: 4 answers of at most 16 tokens per node (a
#: 3-node query on the embedded SmolLM2: 8.6 s of one CPU core, against 24.3 s for SeaKR's;
#: benchmarks/llamaindex_rerank_sampling.py).
FAST_SAMPLING: Mapping[str, Any] = {"k": 4, "max_new_tokens": 16}
#: SeaKR's paper: 20 answers of at most 100 tokens per node (the core's defaults).
PAPER_SAMPLING: Mapping[str, Any] = {"k": 20, "max_new_tokens": 100}

_KEYS = ("uncertainty", "prompt_template", "stop", "formatted")


def fast_reranker() -> UncertaintyReranker:
    """The default re-ranker: SeaKR's U on the embedded LM with ``FAST_SAMPLING``."""
    return UncertaintyReranker(SelfAwareUncertainty(**FAST_SAMPLING))


def paper_reranker() -> UncertaintyReranker:
    """SeaKR's own settings on the embedded LM (``PAPER_SAMPLING``)."""
    return UncertaintyReranker(SelfAwareUncertainty(**PAPER_SAMPLING))


def reranker_settings(reranker: UncertaintyReranker) -> dict[str, Any]:
    """The JSON settings that rebuild ``reranker`` (see ``reranker_from_settings``).

    Raises:
        ValueError: the re-ranker or its estimator is a subclass, or the estimator
            probes a model other than the embedded default.
    """
    estimator = reranker.uncertainty
    if type(reranker) is not UncertaintyReranker or type(estimator) is not SelfAwareUncertainty:
        raise ValueError(
            f"SeaKRRerank cannot serialise a {type(reranker).__name__} over a {type(estimator).__name__}: "
            "JSON names only UncertaintyReranker and SelfAwareUncertainty themselves; pass the re-ranker "
            "again when loading: SeaKRRerank.from_dict(data, reranker=...)"
        )
    if estimator.lm is not default_llm():
        raise ValueError(
            f"SeaKRRerank cannot serialise its re-ranker: the estimator probes {estimator.lm.model_id!r}, a "
            "model given as an object, which JSON cannot name (only the embedded default is written). Pass "
            "the re-ranker again when loading: SeaKRRerank.from_dict(data, reranker=...)"
        )
    return {
        "uncertainty": estimator.get_params(),
        "prompt_template": reranker.prompt_template,
        "stop": list(reranker.stop),
        "formatted": reranker.formatted,
    }


def reranker_from_settings(settings: Mapping[str, Any]) -> UncertaintyReranker:
    """The re-ranker ``settings`` describe, on the embedded LM; a setting left out takes
    the default re-ranker's value.

    Raises:
        ValueError: a setting is unknown or invalid.
    """
    _check_keys(settings, _KEYS, "SeaKRRerank's reranker settings")
    uncertainty = settings.get("uncertainty", {})
    if not isinstance(uncertainty, Mapping):
        raise ValueError(f"the reranker's 'uncertainty' settings must be a mapping, got {type(uncertainty).__name__}")
    _check_keys(uncertainty, tuple(SelfAwareUncertainty().get_params()), "the reranker's 'uncertainty' settings")
    own = {key: settings[key] for key in _KEYS[1:] if key in settings}
    return UncertaintyReranker(SelfAwareUncertainty(**{**FAST_SAMPLING, **uncertainty}), **own)


def _check_keys(settings: Mapping[str, Any], known: tuple[str, ...], what: str) -> None:
    unknown = sorted(set(settings) - set(known))
    if unknown:
        raise ValueError(f"unknown keys {unknown} in {what}; the keys are {list(known)}")

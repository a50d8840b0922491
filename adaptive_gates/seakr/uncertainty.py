"""Self-aware uncertainty U (SeaKR, SPEC §4.1): how much do the LLM's internal states
disagree across answers it samples for the same context?

Draw k answers, read one hidden vector per answer at an EOS that closes it, and measure
the spread of those k vectors: U = (1/k)·logdet(Z J Zᵀ + αI), with J centring each
vector over its features (the EigenScore of INSIDE, in SeaKR's form). Answers that
mean the same thing give nearly parallel vectors and U near its floor; answers that
disagree span more directions and raise U. Higher U = less sure = more need to retrieve.

Paper (SeaKR, default): k=20, T=1.0, top-k 50, top-p 0.9, 100 new tokens, the MLP output
of the middle decoder layer, the Gram matrix Z J Zᵀ, α=1e-3, natural log.
INSIDE (``SelfAwareUncertainty.inside``): the residual stream, ``torch.cov``'s covariance
(Z J Zᵀ / (d−1)), log10, k=10, T=0.5. Both read the state at the closing EOS; INSIDE's
own code read it at the last generated token.
Our additions: the samples and their EOS states come from one decoding loop
(``LocalCausalLM.sample_with_states``) instead of a sampling call plus a second forward
pass, and each estimate carries the paper's cheap ablation signals (perplexity,
length-normalised entropy, energy) computed from the same samples. Two options trade
faithfulness for time (both off by default, as in the paper): ``early_stop`` ends the
sampling once the first samples all give the same answer, and ``cap_to_greedy`` cuts
samples at the length of the greedy answer whose uncertainty is wanted.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ..models.protocols import check_probing_lm
from ..records.answer_metrics import normalize_answer
from ..records.validation import check_sampling

if TYPE_CHECKING:
    from ..models.lm.probe import ProbedSample
    from ..models.protocols import ProbingLM

logger = logging.getLogger(__name__)

Site = Literal["mlp_output", "residual"]
LogBase = Literal["e", "10"]
Variant = Literal["seakr", "inside"]

_SITES = ("mlp_output", "residual")
_LOG_BASES = ("e", "10")
_VARIANTS = ("seakr", "inside")


@dataclass(frozen=True)
class UncertaintyEstimate:
    """U for one context, with the samples it came from and the ablation signals.

    Attributes:
        value: U; ``math.nan`` when no sample was usable (then retrieve).
        n_samples: the samples U was computed from (non-empty answers).
        perplexity: mean over those samples of ``exp(-mean token log-prob)``.
        entropy: length-normalised entropy, ``-(1/K)·Σ_k (1/T_k)·Σ_t log p(y_t^k)``:
            the mean per-token negative log-likelihood of the samples.
        energy: mean over samples of the per-token energy ``-logsumexp(logits)``
            (temperature 1); lower = the model put more mass on its choices.
        samples: the usable samples' texts.
        stopped_early: True when ``early_stop`` ended the sampling before k samples: U
            is then that of k samples repeating the ones drawn (see
            ``SelfAwareUncertainty``).

    Log-probabilities and logits are the model's raw next-token distribution (no
    temperature, top-k or top-p) at each generated token, the closing EOS or
    stop-string token included. All three signals are NaN when ``value`` is.
    """

    value: float
    n_samples: int
    perplexity: float
    entropy: float
    energy: float
    samples: tuple[str, ...]
    stopped_early: bool = False

    @property
    def defined(self) -> bool:
        """False when no sample was usable, so U has no value."""
        return math.isfinite(self.value)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (NaN becomes ``None``, samples a list)."""
        out = asdict(self)
        out["samples"] = list(self.samples)
        for key in ("value", "perplexity", "entropy", "energy"):
            if not math.isfinite(out[key]):
                out[key] = None
        return out


UNDEFINED = UncertaintyEstimate(math.nan, 0, math.nan, math.nan, math.nan, ())


def eigen_score(
    states: np.ndarray, alpha: float = 1e-3, *, variant: Variant = "seakr", log_base: LogBase = "e"
) -> float:
    """U of a ``(k, d)`` matrix Z of sample representations (one row per sample).

    ``variant="seakr"``: Σ = Z J Zᵀ with J = I_d − (1/d)·11ᵀ (each row centred over its
    features; not divided by d or k). ``variant="inside"``: Σ = Z J Zᵀ / (d − 1), what
    ``torch.cov(Z)`` returns. Then U = (1/k)·log det(Σ + αI_k), in float64.

    Identical rows z give the floor ((k−1)·log α + log(k·‖Jz‖² + α)) / k (for the
    Gram form): about −6.2 for LLaMA-2-7B at k=20 with natural logs. It depends on k,
    α and the model, which is why a threshold on U must be calibrated, not copied.
    """
    z = np.asarray(states, dtype=np.float64)
    if z.ndim != 2 or z.shape[0] < 1 or z.shape[1] < 2:
        raise ValueError(f"states must be a (k, d) matrix with k >= 1 and d >= 2, got shape {z.shape}")
    if not np.all(np.isfinite(z)):
        raise ValueError("states must be finite")
    _check_alpha(alpha)
    _check_choice(variant, _VARIANTS, "variant")
    _check_choice(log_base, _LOG_BASES, "log_base")
    k, d = z.shape
    centred = z - z.mean(axis=1, keepdims=True)  # Z J (J is symmetric and idempotent)
    sigma = centred @ centred.T
    if variant == "inside":
        sigma /= d - 1
    _, logdet = np.linalg.slogdet(sigma + alpha * np.eye(k))  # positive definite for alpha > 0
    u = logdet / k
    return float(u / math.log(10) if log_base == "10" else u)


class SelfAwareUncertainty:
    """The self-aware uncertainty U of an LLM for a context (SPEC §4.1).

    Args:
        lm: the model to probe, a ``ProbingLM`` such as ``LocalCausalLM``; ``None`` =
            the embedded default (``default_llm()``).
        k, temperature, top_k, top_p, max_new_tokens, seed: how the answers are sampled.
        layer: 0-based decoder layer read; ``None`` = the middle one, ``num_layers // 2``
            (SmolLM2-135M: 15 of 30; SeaKR read 0-based layer 15 of LLaMA-2-7B's 32).
        site: ``"mlp_output"`` (SeaKR: the feed-forward output before the residual add)
            or ``"residual"`` (INSIDE: the layer's output hidden state).
        alpha: the ridge α added to Σ before the log-determinant.
        log_base: ``"e"`` (SeaKR) or ``"10"`` (INSIDE).
        variant: ``"seakr"`` (Gram matrix Z J Zᵀ) or ``"inside"`` (``torch.cov``).
        early_stop: ``None`` (the paper: always k samples in one batch), or m in 2..k:
            draw the first m samples; when none is empty and all give the same answer
            after answer normalisation (``answer_metrics.normalize_answer``), stop, and compute
            U as if every further sample repeated them (their states cycled to k rows),
            on the scale of k samples that a threshold was calibrated on. Otherwise draw
            the other k − m (the prompt's states kept by the prefix cache): every sample
            draws from its own seeded stream, so U is then the one without the option
            (up to float rounding), at the price of a second, smaller decoding loop.
        cap_to_greedy: when ``estimate`` is given the greedy answer's length in tokens
            (the gate's pseudo-generation), samples stop there too (an EOS closes a
            capped sample, as at ``max_new_tokens``). ``False``: the paper's cap only.

    ``estimate`` draws the samples with ``stop`` strings (use the same as the greedy
    call whose uncertainty is wanted) and returns an ``UncertaintyEstimate``.
    """

    def __init__(
        self,
        lm: ProbingLM | None = None,
        *,
        k: int = 20,
        temperature: float = 1.0,
        top_k: int = 50,
        top_p: float = 0.9,
        max_new_tokens: int = 100,
        seed: int = 0,
        layer: int | None = None,
        site: Site = "mlp_output",
        alpha: float = 1e-3,
        log_base: LogBase = "e",
        variant: Variant = "seakr",
        early_stop: int | None = None,
        cap_to_greedy: bool = False,
    ) -> None:
        check_sampling(k, temperature, top_k, top_p, max_new_tokens)
        _check_int(seed, "seed", None)
        if layer is not None:
            _check_int(layer, "layer", 0)
        _check_alpha(alpha)
        _check_choice(site, _SITES, "site")
        _check_choice(log_base, _LOG_BASES, "log_base")
        _check_choice(variant, _VARIANTS, "variant")
        if early_stop is not None:
            _check_int(early_stop, "early_stop", 2)
            if early_stop > k:
                raise ValueError(f"early_stop must be <= k ({k}) or None, got {early_stop}")
        if not isinstance(cap_to_greedy, bool):
            raise ValueError(f"cap_to_greedy must be a bool, got {cap_to_greedy!r}")
        if lm is not None:
            check_probing_lm(lm, "SelfAwareUncertainty")
        self._lm = lm
        self.k = k
        self.temperature = float(temperature)
        self.top_k = top_k
        self.top_p = float(top_p)
        self.max_new_tokens = max_new_tokens
        self.seed = seed
        self.layer = layer
        self.site = site
        self.alpha = float(alpha)
        self.log_base = log_base
        self.variant = variant
        self.early_stop = early_stop
        self.cap_to_greedy = cap_to_greedy

    @classmethod
    def inside(cls, lm: ProbingLM | None = None, **overrides: Any) -> SelfAwareUncertainty:
        """INSIDE's EigenScore settings (SPEC §4.1): residual stream, ``torch.cov``,
        log10, k=10, T=0.5; any of them can be overridden."""
        settings: dict[str, Any] = {
            "site": "residual",
            "variant": "inside",
            "log_base": "10",
            "k": 10,
            "temperature": 0.5,
        }
        return cls(lm, **{**settings, **overrides})

    @classmethod
    def fast(cls, lm: ProbingLM | None = None, **overrides: Any) -> SelfAwareUncertainty:
        """SeaKR's settings with both time savers on: ``early_stop=5`` and
        ``cap_to_greedy=True`` (see ``benchmarks/results/seakr_cost.md`` for what they
        cost and change); any setting can be overridden."""
        return cls(lm, **{"early_stop": 5, "cap_to_greedy": True, **overrides})

    @property
    def lm(self) -> ProbingLM:
        """The probed model (the embedded default unless one was given)."""
        if self._lm is None:
            from ..models.defaults import default_llm

            self._lm = default_llm()
        return self._lm

    @property
    def layer_(self) -> int:
        """The decoder layer actually read (resolves ``layer=None``; loads the model)."""
        n_layers = self.lm.num_layers
        layer = n_layers // 2 if self.layer is None else self.layer
        if layer >= n_layers:
            raise ValueError(f"layer must be < {n_layers} for {self.lm.model_id}, got {layer}")
        return layer

    @property
    def module_path(self) -> str:
        """The sub-module whose output is read at the closing EOS."""
        from ..models.lm.local import layer_module_path

        return layer_module_path(self.layer_, "mlp" if self.site == "mlp_output" else None)

    def get_params(self) -> dict[str, Any]:
        """The constructor parameters except ``lm`` (JSON values)."""
        return {
            "k": self.k,
            "temperature": self.temperature,
            "top_k": self.top_k,
            "top_p": self.top_p,
            "max_new_tokens": self.max_new_tokens,
            "seed": self.seed,
            "layer": self.layer,
            "site": self.site,
            "alpha": self.alpha,
            "log_base": self.log_base,
            "variant": self.variant,
            "early_stop": self.early_stop,
            "cap_to_greedy": self.cap_to_greedy,
        }

    def estimate(
        self,
        prompt: str,
        *,
        stop: Sequence[str] | None = None,
        formatted: bool = False,
        greedy_tokens: int | None = None,
    ) -> UncertaintyEstimate:
        """U of the model for ``prompt`` (a user message, or the full model input when
        ``formatted``); samples are cut at ``stop`` strings. Samples with empty (or
        whitespace-only) text are dropped; with none left U is undefined (NaN).
        ``greedy_tokens``: the length of the greedy answer to ``prompt``, the samples'
        cap when ``cap_to_greedy`` is on."""
        max_new_tokens = self.max_new_tokens
        if greedy_tokens is not None:
            _check_int(greedy_tokens, "greedy_tokens", 1)
            if self.cap_to_greedy:
                max_new_tokens = min(max_new_tokens, greedy_tokens)

        def draw(first: int, count: int) -> list[ProbedSample]:
            return self.lm.sample_with_states(
                prompt,
                count,
                module_path=self.module_path,
                temperature=self.temperature,
                top_k=self.top_k,
                top_p=self.top_p,
                max_new_tokens=max_new_tokens,
                seed=self.seed,
                stop=stop,
                formatted=formatted,
                # Only the second draw of early_stop numbers its samples on: a probing LM
                # written before first_sample existed still serves the paper's settings.
                **({"first_sample": first} if first else {}),
            )

        if self.early_stop is None:
            probes = draw(0, self.k)
        else:  # the prefix cache keeps the prompt's states for the second draw
            with self.lm.prefix_cache(1):
                probes = draw(0, self.early_stop)
                if len(probes) < self.k and not _agreeing(probes):
                    probes += draw(self.early_stop, self.k - self.early_stop)
        usable = [p for p in probes if p.generation.text.strip()]
        if not usable:
            logger.info("no usable sample among %d: U is undefined", len(probes))
            return UNDEFINED
        stopped_early = len(probes) < self.k
        states = np.stack([p.state for p in usable])
        if stopped_early:  # as if the remaining samples repeated those drawn: the scale of k samples
            states = states[np.arange(self.k) % len(usable)]
        u = eigen_score(states, self.alpha, variant=self.variant, log_base=self.log_base)
        texts = tuple(p.generation.text for p in usable)
        return UncertaintyEstimate(u, len(usable), *_ablation_signals(usable), texts, stopped_early)

    def estimate_batch(
        self, prompts: Sequence[str], *, stop: Sequence[str] | None = None, formatted: bool = False
    ) -> list[UncertaintyEstimate]:
        """``estimate`` for each prompt (each prompt's k samples form one batch)."""
        if isinstance(prompts, str):
            raise ValueError("estimate_batch() takes a sequence of prompts, got a single string")
        return [self.estimate(p, stop=stop, formatted=formatted) for p in prompts]

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({params})"


def _agreeing(samples: Sequence[ProbedSample]) -> bool:
    """``early_stop``'s rule: no sample is empty and all give one normalised answer."""
    answers = {normalize_answer(p.generation.text) for p in samples}
    return "" not in answers and len(answers) == 1


def _ablation_signals(samples: Sequence[ProbedSample]) -> tuple[float, float, float]:
    """Perplexity, length-normalised entropy and energy (see ``UncertaintyEstimate``)."""
    nll = np.array([-np.mean(p.generation.token_logprobs) for p in samples])
    energy = np.array([np.mean(p.token_energies) for p in samples])
    return float(np.mean(np.exp(nll))), float(np.mean(nll)), float(np.mean(energy))


def _check_int(value: object, name: str, low: int | None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or (low is not None and value < low):
        bound = "an int" if low is None else f"an int >= {low}"
        raise ValueError(f"{name} must be {bound}, got {value!r}")


def _check_alpha(alpha: object) -> None:
    if not (isinstance(alpha, (int, float)) and math.isfinite(alpha) and alpha > 0):
        raise ValueError(f"alpha must be a finite number > 0, got {alpha!r}")


def _check_choice(value: object, choices: tuple[str, ...], name: str) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")

"""SeaKR building blocks against the real embedded SmolLM2-135M-Instruct: the
uncertainty U, its EOS probe, the gate, the re-ranker and the reasoning selector.

Samples use k=8 and 16 new tokens to stay fast; the prompts were chosen so the
outcomes hold across sampling seeds (checked on seeds 0-3), not just seed 0.
"""

from __future__ import annotations

import math
import string

import numpy as np
import pytest
from langchain_core.documents import Document

from adaptive_gates import (
    AnswerCandidate,
    ProbingLM,
    ReasoningSelector,
    SeaKRGate,
    SelfAwareUncertainty,
    UncertaintyReranker,
    eigen_score,
    load_gate,
)
from adaptive_gates.answering.answerer import build_prompt
from adaptive_gates.errors import BackendError, GateLoadError, NotFittedError
from adaptive_gates.models import LocalCausalLM, layer_module_path
from adaptive_gates.models.lm.generation import Generation
from adaptive_gates.seakr import snippet_text
from adaptive_gates.seakr.step import PseudoStep
from adaptive_gates.seakr.uncertainty import UNDEFINED, UncertaintyEstimate

KNOWN = "What is the capital of France?"  # SmolLM2 answers "Paris" in most samples
UNKNOWN = "who played the mother in the black stallion"  # every sample a different name
FAST = {"k": 8, "max_new_tokens": 16}

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ---------------------------------------------------------------- the formula
def test_eigen_score_matches_a_hand_computed_case() -> None:
    # Z = I_2: centred rows (0.5, -0.5) and (-0.5, 0.5), so Σ = [[.5, -.5], [-.5, .5]]
    # with eigenvalues 1 and 0: U = (ln(1 + α) + ln α) / 2.
    alpha = 1e-3
    assert eigen_score(np.eye(2), alpha) == pytest.approx((math.log(1 + alpha) + math.log(alpha)) / 2, rel=1e-12)
    # A general case against the literal formula with an explicit J.
    z = np.random.default_rng(0).normal(size=(5, 7))
    j = np.eye(7) - np.ones((7, 7)) / 7
    sigma = z @ j @ z.T
    expected = np.log(np.linalg.det(sigma + alpha * np.eye(5))) / 5
    assert eigen_score(z.astype(np.float32), alpha) == pytest.approx(expected, rel=1e-6)
    assert eigen_score(z, alpha, log_base="10") == pytest.approx(eigen_score(z, alpha) / math.log(10), rel=1e-12)


def test_identical_samples_give_the_analytic_floor() -> None:
    # Identical rows z: Σ = ‖c‖²·11ᵀ (c = z centred), eigenvalues k‖c‖² and 0 (k−1 times).
    alpha, k = 1e-3, 20
    z = np.random.default_rng(1).normal(size=64)
    c2 = float(np.sum((z - z.mean()) ** 2))
    floor = ((k - 1) * math.log(alpha) + math.log(k * c2 + alpha)) / k
    u = eigen_score(np.tile(z, (k, 1)), alpha)
    assert u == pytest.approx(floor, rel=1e-9)
    # Any disagreement lifts U above the floor.
    noisy = np.tile(z, (k, 1)) + np.random.default_rng(2).normal(scale=0.1, size=(k, 64))
    assert eigen_score(noisy, alpha) > floor + 1.0


def test_inside_variant_is_torch_cov_in_log10() -> None:
    import torch

    z = np.random.default_rng(3).normal(size=(10, 32))
    cov = torch.cov(torch.tensor(z)).numpy()  # rows are the variables: (10, 10)
    expected = np.mean(np.log10(np.linalg.eigvalsh(cov + 1e-3 * np.eye(10))))
    assert eigen_score(z, 1e-3, variant="inside", log_base="10") == pytest.approx(expected, rel=1e-9)
    inside = SelfAwareUncertainty.inside(temperature=0.7)
    assert (inside.site, inside.variant, inside.log_base, inside.k, inside.temperature) == (
        "residual",
        "inside",
        "10",
        10,
        0.7,
    )


def test_bad_parameters_are_refused() -> None:
    for bad in ({"k": 0}, {"alpha": 0}, {"site": "attention"}, {"log_base": "2"}, {"top_p": 1.5}, {"layer": -1}):
        with pytest.raises(ValueError):
            SelfAwareUncertainty(**bad)
    with pytest.raises(ValueError):
        eigen_score(np.zeros(5))
    with pytest.raises(ValueError):
        SeaKRGate(prompt_template="no slot here")


def test_samples_and_their_length_have_an_upper_bound() -> None:
    """10**20 samples asked for memory no machine has; refused before any is drawn."""
    assert SelfAwareUncertainty(k=64, max_new_tokens=32768).k == 64
    with pytest.raises(ValueError, match="k must be at most 64, got 100000000000000000000"):
        SelfAwareUncertainty(k=10**20)
    with pytest.raises(ValueError, match="max_new_tokens must be at most 32768"):
        SelfAwareUncertainty(max_new_tokens=10**6)


# ------------------------------------------------------------- the EOS probe
def _reference_states(lm: LocalCausalLM, prompt: str, probes, module_path: str, *, close: bool = True):
    """The probe computed the plain way (SPEC §4.1): one right-padded forward pass over
    prompt + each sample with its closing EOS, read at that EOS position."""
    import torch

    prompt_ids = lm.tokenizer(lm.format_prompt(prompt)).input_ids
    assert len(prompt_ids) == probes[0].generation.prompt_tokens
    eos = lm.eos_token_id
    rows = []
    for p in probes:
        ids = list(p.generation.token_ids)
        if close and p.generation.finish_reason == "stop":
            ids[-1] = eos
        elif close and p.generation.finish_reason == "length":
            ids.append(eos)
        rows.append(prompt_ids + ids)
    width = max(map(len, rows))
    ids = torch.tensor([r + [eos] * (width - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    with lm.capture(module_path) as out:
        logits = lm.forward(ids, mask)
    states = np.stack([out[0][i, len(r) - 1].numpy() for i, r in enumerate(rows)])
    return states, logits, len(prompt_ids)


@pytest.mark.parametrize(
    ("prompt", "stop", "site", "reasons"),
    [
        ("Write a short poem about the sea.", [","], "mlp", {"stop", "length"}),
        ("What is the capital of France? Answer with one word.", None, "mlp", {"eos", "length"}),
        ("What is the capital of France? Answer with one word.", None, None, {"eos", "length"}),
    ],
)
def test_probe_reads_the_closing_eos(lm: LocalCausalLM, prompt: str, stop, site, reasons: set[str]) -> None:
    import torch

    path = layer_module_path(lm.num_layers // 2, site)
    probes = lm.sample_with_states(prompt, 6, module_path=path, max_new_tokens=8, stop=stop, seed=0)
    assert {p.generation.finish_reason for p in probes} == reasons
    got = np.stack([p.state for p in probes])
    expected, logits, n_prompt = _reference_states(lm, prompt, probes, path)
    np.testing.assert_allclose(got, expected, atol=1e-3, rtol=1e-4)
    if "stop" in reasons:  # the replacement matters: the stop token's own state differs
        kept, _, _ = _reference_states(lm, prompt, probes, path, close=False)
        stopped = [i for i, p in enumerate(probes) if p.generation.finish_reason == "stop"]
        assert np.abs(kept[stopped] - got[stopped]).max() > 0.1
    for i, p in enumerate(probes):  # log-probs and energies are those of the plain pass
        g = p.generation
        assert not any(s in g.text for s in stop or [])  # text cut before the stop string
        step_logits = logits[i, n_prompt - 1 : n_prompt - 1 + len(g.token_ids)]
        lps = torch.log_softmax(step_logits, -1).gather(1, torch.tensor(g.token_ids)[:, None]).squeeze(1)
        np.testing.assert_allclose(g.token_logprobs, lps.numpy(), atol=1e-3)
        np.testing.assert_allclose(p.token_energies, (-torch.logsumexp(step_logits, -1)).numpy(), atol=1e-3)
        assert (g.token_ids[-1] == lm.eos_token_id) == (g.finish_reason == "eos")


def test_local_lm_is_a_probing_lm(lm: LocalCausalLM) -> None:
    assert isinstance(lm, ProbingLM)
    unloaded = LocalCausalLM()
    SeaKRGate(unloaded)  # checked without reading the properties that load the model
    assert unloaded._model is None
    assert not isinstance(object(), ProbingLM)


def test_a_non_probing_lm_is_refused_by_name() -> None:
    class ChatOnly:  # a chat model: generates, but has no probe
        model_id = "chat"

        def generate(self, prompts, **kwargs):
            return []

    with pytest.raises(
        TypeError,
        match=r"SelfAwareUncertainty needs a probing LM.*ChatOnly lacks "
        "num_layers, prefix_cache, sample_with_states, tokenizer",
    ):
        SelfAwareUncertainty(ChatOnly())
    with pytest.raises(TypeError, match="SeaKRGate needs a probing LM"):
        SeaKRGate(ChatOnly())


def test_probe_is_seeded(lm: LocalCausalLM) -> None:
    path = layer_module_path(lm.num_layers // 2)
    runs = [lm.sample_with_states(KNOWN, 4, module_path=path, max_new_tokens=6, seed=s) for s in (0, 0, 1)]
    texts = [[p.generation.text for p in run] for run in runs]
    assert texts[0] == texts[1] != texts[2]
    np.testing.assert_array_equal(runs[0][0].state, runs[1][0].state)


# ------------------------------------------------------------------- U itself
def test_u_is_lower_when_the_model_answers_consistently(lm: LocalCausalLM) -> None:
    u = SelfAwareUncertainty(lm, **FAST)
    known = u.estimate(build_prompt(KNOWN), stop=["\n"])
    unknown = u.estimate(build_prompt(UNKNOWN), stop=["\n"])
    assert known.defined and unknown.defined and known.n_samples == unknown.n_samples == 8
    assert known.value < unknown.value - 1.0
    assert sum("Paris" in s for s in known.samples) >= 4
    # The ablation signals agree in direction on this pair.
    assert known.perplexity < unknown.perplexity and known.entropy < unknown.entropy
    record = known.to_dict()
    assert record["value"] == known.value and record["samples"] == list(known.samples)


def test_no_usable_sample_leaves_u_undefined(lm: LocalCausalLM) -> None:
    # Every first token starts with a letter or digit, so every text is cut to "".
    stops = list(string.ascii_letters + string.digits)
    estimate = SelfAwareUncertainty(lm, k=4, max_new_tokens=2).estimate(KNOWN, stop=stops)
    assert not estimate.defined and estimate.n_samples == 0 and estimate.samples == ()
    assert estimate.to_dict()["value"] is None


# ----------------------------------------------------------------------- gate
def test_gate_needs_a_threshold_before_deciding(lm: LocalCausalLM) -> None:
    gate = SeaKRGate(lm)
    with pytest.raises(NotFittedError, match="calibrate"):
        gate.decide(KNOWN)
    with pytest.raises(ValueError, match="not both"):
        SeaKRGate(lm, uncertainty=SelfAwareUncertainty(lm))


def test_gate_calibrates_saves_and_loads(lm: LocalCausalLM, tmp_path) -> None:
    questions = [KNOWN, UNKNOWN, "What is 2 + 2?", "how many seasons of the bastard executioner are there"]
    # 8 tokens a sample: KNOWN has the lowest U under seeds 0-3 as with longer samples
    gate = SeaKRGate(lm, uncertainty={"k": 6, "max_new_tokens": 8}).calibrate(questions, target_rate=0.5)
    assert gate.calibration_.realised_rate == 0.5
    gate.save(tmp_path / "seakr")
    loaded = load_gate(tmp_path / "seakr", lm=lm)
    assert isinstance(loaded, SeaKRGate) and loaded.estimator.get_params() == gate.estimator.get_params()
    assert (loaded.threshold_, loaded.calibration_) == (gate.threshold_, gate.calibration_)
    assert (loaded.prompt_template, list(loaded.stop)) == (gate.prompt_template, list(gate.stop))

    # The loaded gate redraws the same samples, so it retrieves for the calibrated share.
    decisions = loaded.decide_batch(questions)
    highest = set(np.argsort([d.score for d in decisions])[-2:].tolist())
    assert {i for i, d in enumerate(decisions) if d.retrieve} == highest
    assert not decisions[0].retrieve  # KNOWN has the lowest U
    d = decisions[0]
    assert d.gate == "seakr" and d.error is None and d.score == d.details["uncertainty"]
    assert d.details["n_samples"] == 6 and 1 <= len(d.details["samples"]) <= 3
    assert {"perplexity", "entropy", "energy"} <= d.details.keys()
    with pytest.raises(GateLoadError, match="model_id"):
        load_gate(tmp_path / "seakr", lm=LocalCausalLM("/another/model"))


def test_pseudo_step_rule() -> None:
    """SPEC §4.2's rule on a context: retrieve iff U > δ, or the greedy step is empty, or U
    is undefined; the last two whatever δ is, with the reason."""
    said = Generation(" Paris", [1], [-0.1], "stop", 3)
    silent = Generation("  ", [2], [-0.1], "stop", 3)
    u = UncertaintyEstimate(2.0, 4, 1.0, 0.5, -3.0, ("Paris",) * 4)
    assert PseudoStep(said, u).forced_reason is None and PseudoStep(said, u).text == "Paris"
    assert PseudoStep(said, u).retrieves(1.9) and not PseudoStep(said, u).retrieves(2.0)
    for step, reason in ((PseudoStep(silent, None), "empty greedy step"), (PseudoStep(said, UNDEFINED), "U undefined")):
        assert reason in step.forced_reason and step.retrieves(math.inf)


def test_gate_pseudo_generates_then_measures_u_of_the_question(lm: LocalCausalLM) -> None:
    gate = SeaKRGate(uncertainty=SelfAwareUncertainty(lm, **FAST), threshold=0.0)
    d = gate.decide(KNOWN)
    # The greedy step is the answer prompt's own greedy answer...
    greedy = lm.generate(build_prompt(KNOWN), max_new_tokens=gate.step_tokens, stop=["\n"])[0].text.strip()
    assert d.details["pseudo_step"] == greedy and "Paris" in greedy
    # ...and U is that of the question's context (not of the context plus the step).
    expected = SelfAwareUncertainty(lm, **FAST).estimate(build_prompt(KNOWN), stop=["\n"])
    assert d.score == d.details["uncertainty"] == pytest.approx(expected.value, abs=1e-9)
    assert d.error is None and d.retrieve == (d.score > 0.0)


def test_gate_retrieves_on_an_empty_greedy_step(lm: LocalCausalLM) -> None:
    # Every first token starts with a letter or digit, so the greedy step is cut to "".
    gate = SeaKRGate(
        uncertainty=SelfAwareUncertainty(lm, k=4, max_new_tokens=2),
        stop=list(string.ascii_letters + string.digits),
        threshold=1e9,  # no defined U would retrieve
    )
    d = gate.decide(KNOWN)
    assert d.retrieve and math.isnan(d.score)
    assert "empty greedy step" in d.error
    assert d.details == {"pseudo_step": ""}  # U was not computed: the step decides
    with pytest.raises(BackendError):  # no U to calibrate on
        gate.score([KNOWN])


# ------------------------------------------------------------ the re-ranker
class _Node:
    """A LlamaIndex-style node: its text comes from ``get_content()``."""

    def __init__(self, text: str) -> None:
        self._text = text

    def get_content(self) -> str:
        return self._text


class _Texted:
    def __init__(self, text: object) -> None:
        self.text = text


def test_snippet_text_reads_each_framework_accessor() -> None:
    assert snippet_text("plain") == "plain"
    assert snippet_text(Document(page_content="from langchain", metadata={"id": 3})) == "from langchain"
    assert snippet_text(_Node("from llama-index")) == "from llama-index"
    assert snippet_text(_Texted("from text")) == "from text"
    with pytest.raises(TypeError, match="page_content, get_content\\(\\) or text; got object"):
        snippet_text(object())
    with pytest.raises(TypeError, match="text must be a str, got int"):
        snippet_text(_Texted(7))


def test_reranker_puts_the_relevant_snippet_first(lm: LocalCausalLM) -> None:
    # A LlamaIndex-style node, a real LangChain Document and a string, as retrievers give them.
    snippets = [
        _Node("Mount Kilimanjaro is a dormant volcano in Tanzania and the highest mountain in Africa."),
        Document(
            page_content="The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France."
        ),
        "The violin is a wooden string instrument with four strings, usually played with a bow.",
    ]
    ranked = UncertaintyReranker(SelfAwareUncertainty(lm, **FAST)).rerank(
        "In which city is the Eiffel Tower?", snippets
    )
    assert ranked[0].index == 1
    assert ranked[0].item is snippets[1] and ranked[0].text.startswith("The Eiffel Tower")
    assert {id(r.item) for r in ranked} == {id(s) for s in snippets}  # each result carries its own object back
    assert ranked[0].uncertainty < min(r.uncertainty for r in ranked[1:]) - 0.5
    assert all(r.estimate.defined for r in ranked)


def test_reranker_puts_empty_output_last(lm: LocalCausalLM) -> None:
    reranker = UncertaintyReranker(
        SelfAwareUncertainty(lm, k=4, max_new_tokens=2), stop=list(string.ascii_letters + string.digits)
    )
    ranked = reranker.rerank(KNOWN, ["Paris is the capital of France."])
    assert ranked[0].uncertainty == math.inf and not ranked[0].estimate.defined
    with pytest.raises(TypeError, match="snippet 0"):
        reranker.rerank(KNOWN, [object()])
    with pytest.raises(ValueError, match="snippet 0 is empty"):
        reranker.rerank(KNOWN, [Document(page_content=" ")])


def test_a_snippet_whose_u_cannot_be_measured_ranks_last_with_why(lm: LocalCausalLM) -> None:
    class FailingOnViolins(SelfAwareUncertainty):
        def estimate(self, prompt, **kwargs):
            if "violin" in prompt:
                raise BackendError("the probing model ran out of memory")
            return super().estimate(prompt, **kwargs)

    snippets = ["The violin is a wooden string instrument.", "Paris is the capital of France."]
    ranked = UncertaintyReranker(FailingOnViolins(lm, k=2, max_new_tokens=4)).rerank(KNOWN, snippets)
    assert [r.index for r in ranked] == [1, 0]
    assert ranked[1].uncertainty == math.inf and ranked[1].estimate is None
    assert ranked[1].error == "BackendError: the probing model ran out of memory"
    assert ranked[0].error is None and ranked[0].estimate is not None


# ------------------------------------------------------------- the selector
def test_selector_fallbacks_without_computing_u() -> None:
    selector = ReasoningSelector()  # no estimator is built unless U is needed
    pick = selector.select(
        [
            AnswerCandidate("Unknown.", uncertainty=-9.0, name="rationale"),
            AnswerCandidate("Paris", uncertainty=5.0, name="knowledge"),
        ]
    )
    assert (pick.answer, pick.name, pick.reason) == ("Paris", "knowledge", "only usable answer")
    pick = selector.select([AnswerCandidate("Paris"), AnswerCandidate(None)])
    assert (pick.answer, pick.index, pick.uncertainties) == ("Paris", 0, (None, None))
    pick = selector.select([AnswerCandidate("Lyon", uncertainty=math.nan), AnswerCandidate("Paris", uncertainty=3.0)])
    assert (pick.answer, pick.reason) == ("Paris", "lower uncertainty")  # undefined U ranks last
    pick = selector.select([AnswerCandidate("unknown", uncertainty=2.0), AnswerCandidate("", uncertainty=1.0)])
    assert (pick.index, pick.reason) == (1, "no usable answer")
    assert pick.to_dict()["uncertainties"] == [2.0, 1.0]
    assert selector._uncertainty is None
    with pytest.raises(ValueError, match="prompt"):
        selector.select([AnswerCandidate("Paris"), AnswerCandidate("Lyon", uncertainty=1.0)])


def test_selector_computes_u_from_prompts(lm: LocalCausalLM) -> None:
    selector = ReasoningSelector(SelfAwareUncertainty(lm, **FAST))
    pick = selector.select(
        [
            AnswerCandidate("Teri Garr", prompt=build_prompt(UNKNOWN), name="rationale"),
            AnswerCandidate("Paris", prompt=build_prompt(KNOWN), name="knowledge"),
        ]
    )
    assert (pick.answer, pick.reason) == ("Paris", "lower uncertainty")
    assert pick.uncertainties[1] < pick.uncertainties[0]


def test_live_eval_of_the_seakr_gate(qa_records, corpus_path, tmp_path) -> None:
    """`adaptive-gates eval --gate seakr --live`, calibrated on other questions."""
    import json

    from adaptive_gates.cli import main
    from adaptive_gates.records.data import write_jsonl

    rows = [{"id": r.id, "question": r.question, "answers": list(r.answers)} for r in qa_records[:4]]
    train, test = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    write_jsonl(train, rows[:2])  # two questions split at the target rate as many would
    write_jsonl(test, rows[2:])
    out = tmp_path / "seakr.json"
    code = main(
        [
            "eval",
            "--gate",
            "seakr",
            "--live",
            "--train",
            str(train),
            "--test",
            str(test),
            "--corpus",
            str(corpus_path),
            "--target-rate",
            "0.5",
            "--k",
            "1",  # the answers with passages are not what is checked: one passage each keeps them short
            "--json",
            str(out),
            "--option",
            'uncertainty={"k": 4, "max_new_tokens": 8}',
            "--option",
            "step_tokens=8",  # the greedy step as short as its samples: its length proves nothing here
        ]
    )
    assert code == 0
    report = json.loads(out.read_text())
    assert report["gate"] == "seakr" and report["n"] == 2 and report["at_threshold"]["target_rate"] == 0.5
    for row in report["questions"]:
        details = row["details"]
        assert isinstance(details["pseudo_step"], str)
        if row["error"] is None:  # decided by U against the calibrated δ
            assert details["n_samples"] >= 1 and row["score"] == details["uncertainty"]
            assert row["retrieve"] == (row["score"] > report["threshold"])
        else:  # an empty step or undefined U: SeaKR retrieves
            assert "SeaKR retrieves" in row["error"] and row["retrieve"]

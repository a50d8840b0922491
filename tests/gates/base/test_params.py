"""scikit-learn conventions on every gate: constructor arguments kept as given,
get_params / set_params, and ``sklearn.base.clone``."""

import inspect
import logging
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from sklearn.base import clone

from adaptive_gates import (
    BM25DifficultyGate,
    BudgetedGate,
    CascadeGate,
    ExactMemory,
    Gate,
    NotFittedError,
    PopularityGate,
    SeaKRGate,
    SelfAwareUncertainty,
    SKRClassifierGate,
    SKRIclGate,
    SKRKnnGate,
    SKRPromptGate,
    StackedGate,
    ThrustGate,
    VerbalizedGate,
)
from adaptive_gates.gates.base.asking import DEFAULT_DEADLINE
from adaptive_gates.models import ChatReply, LocalCausalLM, LocalChatModel


@pytest.fixture(scope="module")
def chat():
    return LocalChatModel()  # loads its model on first use only


def _gates(embedder, chat):
    """One gate of each type, every argument other than its default."""
    return [
        (
            SKRKnnGate,
            dict(
                embedder=embedder,
                k=4,
                vote="majority",
                weighting="similarity",
                memory=ExactMemory,
                fallback_retrieve=False,
            ),
        ),
        (
            SKRClassifierGate,
            dict(embedder=embedder, C=3, class_weight="balanced", memory=ExactMemory, fallback_retrieve=False),
        ),
        (
            ThrustGate,
            dict(
                representer=embedder,
                n_clusters_rule="floor",
                scale="code",
                level_scores="in_sample",
                n_init=3,
                random_state=7,
                fallback_retrieve=False,
            ),
        ),
        (BM25DifficultyGate, dict(top_k=None, fallback_retrieve=False)),
        (
            VerbalizedGate,
            dict(
                chat=chat,
                strategy="punish",
                template="Q: {question}",
                max_tokens=9,
                judge=False,
                unparseable="first-token",
                top_logprobs=5,
                max_workers=2,
                deadline=30,
                fallback_retrieve=False,
            ),
        ),
        (
            SKRPromptGate,
            dict(
                chat=chat,
                template="{question} Can you answer?",
                known_reply="yes",
                max_tokens=4,
                top_logprobs=3,
                max_workers=2,
                deadline=None,
                fallback_retrieve=False,
            ),
        ),
        (
            SKRIclGate,
            dict(
                chat=chat,
                embedder=embedder,
                template="{question}?",
                known_reply="yes",
                n_demos=2,
                demos="fixed",
                max_tokens=4,
                top_logprobs=0,
                max_workers=3,
                deadline=10,
                memory=ExactMemory,
                fallback_retrieve=False,
            ),
        ),
        (
            SeaKRGate,
            dict(
                uncertainty={"k": 4, "max_new_tokens": 8},
                prompt_template="Q: {question}\nA:",
                stop=["\n", "."],
                step_tokens=5,
                formatted=True,
                threshold=-6,
                fallback_retrieve=False,
            ),
        ),
    ]


def test_every_argument_is_kept_as_given_under_its_name(embedder, chat):
    for cls, args in _gates(embedder, chat):
        gate = cls(**args)
        params = gate.get_params(deep=False)
        names = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
        assert sorted(params) == sorted(names), cls.__name__
        for name in names:
            expected = args.get(name, inspect.signature(cls.__init__).parameters[name].default)
            assert params[name] is expected or (type(params[name]) is type(expected) and params[name] == expected), (
                cls.__name__,
                name,
                params[name],
                expected,
            )


def test_clone_gives_an_unfitted_gate_with_equal_params(embedder, chat):
    for cls, args in _gates(embedder, chat):
        gate = cls(**args)
        copy = clone(gate)
        assert type(copy) is cls and copy is not gate
        copied = copy.get_params(deep=False)
        for name, value in gate.get_params(deep=False).items():
            if name in cls.backend_params:
                assert copied[name] is value, (cls.__name__, name)  # models are shared, not copied
            else:
                assert copied[name] == value and (copied[name] is not value or not isinstance(value, (list, dict)))
        assert copy.calibration_ is None


def test_clone_of_a_fitted_and_calibrated_gate_is_unfitted(outcome_records, cached_embedder):
    questions = [r.question for r in outcome_records]
    embedder = cached_embedder  # each gate and each refit embeds the same questions: once
    fitted = [
        SKRKnnGate(embedder, k=5).fit_outcomes(outcome_records),
        SKRClassifierGate(embedder).fit_outcomes(outcome_records),
        ThrustGate(embedder, level_scores="in_sample").fit(questions),
        BM25DifficultyGate().fit(questions),
    ]
    for gate in fitted:
        gate.calibrate(questions[:40], target_rate=0.3)
        copy = clone(gate)
        assert gate.is_fitted and not copy.is_fitted and copy.calibration_ is None
        with pytest.raises(NotFittedError):
            copy.decide(questions[0])
        # Refitting the clone on the same data reproduces the original's own decisions.
        refit = (
            copy.fit_outcomes(outcome_records)
            if isinstance(copy, (SKRKnnGate, SKRClassifierGate))
            else copy.fit(questions)
        )
        gate.reset_threshold()
        np.testing.assert_allclose(refit.score(questions[:30]), gate.score(questions[:30]))


def test_a_clone_of_a_composite_clones_its_member_gates(outcome_records, cached_embedder):
    """A cascade's stages and a budget's gate are members, not backends: the clone holds
    unfitted clones of them (the original's fitted members stay its own), and shares
    only what the members share, their models."""
    questions = [r.question for r in outcome_records]
    knn = SKRKnnGate(cached_embedder, k=5).fit_outcomes(outcome_records)
    composites = [
        CascadeGate(knn, SKRKnnGate(cached_embedder, k=3).fit_outcomes(outcome_records), band=(0.3, 0.7)),
        BudgetedGate(knn, target_rate=0.3, window=50).calibrate(questions[:40]),
    ]
    for gate in composites:
        copy = clone(gate)
        assert gate.is_fitted and not copy.is_fitted, type(gate).__name__
        for name in type(gate).member_params:
            member, cloned = getattr(gate, name), getattr(copy, name)
            assert type(cloned) is type(member) and cloned is not member
            assert member.is_fitted and not cloned.is_fitted
            assert cloned.get_params(deep=False).keys() == member.get_params(deep=False).keys()
            assert cloned.embedder is member.embedder  # a member's model is shared, as a gate's is
        assert set(copy.get_params()) == set(gate.get_params())  # nested parameters alike
    assert knn.is_fitted and composites[0].decide(questions[0]).error is None  # the original is untouched


def test_clone_of_a_calibrated_chat_gate_drops_the_calibration(chat):
    gate = VerbalizedGate(chat).calibrate_scores(np.linspace(0.0, 1.0, 30), 0.3)
    assert gate.calibration_ is not None and clone(gate).calibration_ is None


def test_set_params_round_trip_and_validation(embedder):
    gate = SKRKnnGate(embedder)
    other = SKRKnnGate(embedder, k=3, vote="majority", weighting="similarity", fallback_retrieve=False)
    assert gate.set_params(**other.get_params()) is gate
    assert gate.get_params() == other.get_params()
    with pytest.raises(ValueError, match="k must be a positive integer"):
        gate.set_params(vote="ratio", k=0)
    assert gate.get_params() == other.get_params()  # a refused value changes nothing
    with pytest.raises(ValueError, match="invalid parameter 'kk'"):
        gate.set_params(kk=3)


def test_set_params_keeps_fitted_state_for_serving_parameters_only(outcome_records, embedder, caplog):
    questions = [r.question for r in outcome_records[:30]]
    gate = SKRKnnGate(embedder, k=5).fit_outcomes(outcome_records).calibrate(questions, target_rate=0.4)
    before = gate.decide_batch(questions)
    gate.set_params(fallback_retrieve=False)  # what a failure does: fitted state still holds
    assert gate.fallback_retrieve is False and gate.calibration_ is not None
    assert [d.details for d in gate.decide_batch(questions)] == [d.details for d in before]
    with caplog.at_level(logging.WARNING):
        gate.set_params(k=7)  # the calibrated threshold belongs to k=5
    assert "fitted state and calibration belong to the old parameters" in caplog.text
    assert not gate.is_fitted and gate.calibration_ is None and gate.k == 7
    with pytest.raises(NotFittedError):
        gate.decide(questions[0])


def test_set_params_of_a_chat_gate_reaches_its_backend(chat):
    gate = SKRPromptGate(chat).calibrate_scores(np.linspace(0.0, 1.0, 30), 0.5)
    gate.set_params(deadline=5.0, max_workers=4)
    assert (gate._backend.deadline, gate._backend.max_workers) == (5.0, 4)
    assert gate.calibration_ is not None  # how it waits on the backend is no part of the threshold
    gate.set_params(known_reply="yes")
    assert gate.calibration_ is None


class _CountingChat:
    """A chat model that replies "Paris. Certain." and counts the requests it answers."""

    def __init__(self, model_id):
        self.model_id = model_id
        self.requests = 0

    def chat(self, messages, **options):
        self.requests += 1
        return ChatReply("Paris. Certain.")


def test_a_chat_gate_builds_its_backend_on_first_use_from_its_current_parameters():
    first, second = _CountingChat("first"), _CountingChat("second")
    gate = VerbalizedGate(first, judge=False)
    assert gate._chat_backend is None  # constructing builds nothing
    gate.decide("What is the capital of France?")
    assert first.requests == 1 and gate._backend.deadline == DEFAULT_DEADLINE
    gate.set_params(chat=second, deadline=5.0)
    gate.decide("What is the capital of France?")
    assert (first.requests, second.requests) == (1, 1)
    assert gate.chat_model is second and gate._backend.deadline == 5.0
    copy = clone(gate)
    assert copy._chat_backend is None
    assert copy._backend is not gate._backend and copy.chat_model is second and copy._backend.deadline == 5.0


def test_a_backend_is_built_once_whichever_threads_ask_first():
    gate = SKRPromptGate(_CountingChat("chat"))
    with ThreadPoolExecutor(8) as pool:
        backends = list(pool.map(lambda _: gate._backend, range(64)))
    assert all(backend is backends[0] for backend in backends)


def test_seakr_builds_its_estimator_on_first_use_from_its_current_parameters():
    unloaded = LocalCausalLM()
    gate = SeaKRGate(unloaded, uncertainty={"k": 4, "max_new_tokens": 8})
    assert gate._estimator is None and unloaded._model is None  # constructing builds and loads nothing
    assert gate.estimator.k == 4 and gate.estimator.lm is unloaded and unloaded._model is None
    gate.set_params(uncertainty={"k": 6})
    assert gate.estimator.k == 6 and gate.estimator.max_new_tokens == 100
    copy = clone(gate)
    assert copy._estimator is None
    assert copy.estimator is not gate.estimator and copy.estimator.get_params() == gate.estimator.get_params()
    with pytest.raises(ValueError, match="k must be a positive int, got 0"):
        gate.set_params(uncertainty={"k": 0})  # settings are refused at once, not at first use
    assert gate.estimator.k == 6


def test_nested_params_are_reported_deep(lm):
    uncertainty = SelfAwareUncertainty(lm, k=3)
    gate = SeaKRGate(uncertainty=uncertainty)
    deep = gate.get_params(deep=True)
    assert deep["uncertainty"] is uncertainty and deep["uncertainty__k"] == 3
    assert "uncertainty__k" not in gate.get_params(deep=False)
    with pytest.raises(ValueError, match="has no set_params"):
        gate.set_params(uncertainty__k=4)


def test_saved_params_are_the_params_without_backends(embedder, chat):
    for cls, args in _gates(embedder, chat):
        gate = cls(**args)
        saved = gate._json_params()
        assert set(saved) == set(gate.get_params(deep=False)) - cls.backend_params, cls.__name__


def test_every_gate_keeps_scikit_learns_estimator_protocol_without_deriving_from_it(embedder, chat):
    """``get_params``, ``set_params`` and ``sklearn.base.clone`` work as on an estimator;
    none of scikit-learn's metadata routing shows on a gate."""
    from sklearn.base import BaseEstimator

    for cls, args in _gates(embedder, chat):
        gate = cls(**args)
        assert not isinstance(gate, BaseEstimator), cls.__name__
        assert gate.get_params(deep=False).keys() == set(cls.param_names()), cls.__name__
        assert clone(gate).get_params(deep=False).keys() == gate.get_params(deep=False).keys(), cls.__name__
        assert not any(hasattr(gate, a) for a in ("set_fit_request", "set_score_request", "get_metadata_routing"))


def test_check_is_fitted_reads_is_fitted(embedder, outcome_records):
    from sklearn.exceptions import NotFittedError as SklearnNotFitted
    from sklearn.utils.validation import check_is_fitted

    knn = SKRKnnGate(embedder, k=5)
    with pytest.raises(SklearnNotFitted):
        check_is_fitted(knn)
    check_is_fitted(knn.fit_outcomes(outcome_records[:60]))
    stacked = StackedGate(members="popularity", embedder=embedder)
    with pytest.raises(SklearnNotFitted):
        check_is_fitted(stacked)
    check_is_fitted(stacked.fit_outcomes(outcome_records[:200]))
    check_is_fitted(PopularityGate())  # needs no fitting
    with pytest.raises(NotImplementedError, match=r"StackedGate has no fit.*fit_outcomes"):
        StackedGate().fit(["q"])


def test_an_unfitted_gate_names_the_verb_that_fits_it(embedder):
    """The error of each way to misuse a gate names the call that fits that gate."""
    knn = SKRKnnGate(embedder)
    cascade = CascadeGate(knn, PopularityGate(), escalation_rate=0.2)
    budget = BudgetedGate(knn, target_rate=0.3)
    with pytest.raises(NotImplementedError, match=r"CascadeGate has no fit\(\); call fit_band\(questions\)"):
        cascade.fit(["q"])
    with pytest.raises(NotImplementedError, match=r"CascadeGate does not learn from outcome records; call fit_band"):
        cascade.fit_outcomes([])
    with pytest.raises(NotFittedError, match=r"CascadeGate is not fitted: call fit_band\(questions\) with both"):
        cascade.decide_batch(["q"])
    with pytest.raises(NotFittedError, match=r"BudgetedGate is not fitted: fit its gate \(call fit\(questions, labels"):
        budget.decide("q")
    with pytest.raises(
        NotFittedError, match=r"SKRKnnGate is not fitted: call fit\(questions, labels\) or fit_outcomes"
    ):
        _ = knn.memory_
    with pytest.raises(
        NotFittedError, match=r"ThrustGate is not fitted: call fit\(questions\) or fit_outcomes\(records\) or load"
    ):
        ThrustGate(embedder).score(["q"])
    with pytest.raises(NotImplementedError, match=r"VerbalizedGate has no fit\(\); it is ready as built"):
        VerbalizedGate().fit(["q"])


def test_gate_classes_are_found_by_name():
    assert Gate.gate_class("skr-knn") is SKRKnnGate
    assert {"skr-knn", "popularity", "stacked", "verbalized"} <= set(Gate.gate_names())
    with pytest.raises(ValueError, match=r"unknown gate 'nope'; choose from .*skr-knn"):
        Gate.gate_class("nope")


def test_a_gate_building_its_backend_holds_up_no_other_gate(embedder):
    """Each gate has its own lock for what it builds on first use: while one gate's
    build waits (a model loading), another gate builds its own at once."""
    import threading

    slow, quick = SKRKnnGate(embedder), SKRKnnGate(embedder)
    started, release = threading.Event(), threading.Event()

    def slow_build():
        started.set()
        release.wait(timeout=60)
        return "slow"

    slow._pending = None
    quick._pending = None
    with ThreadPoolExecutor(2) as pool:
        building = pool.submit(slow._built_once, "_pending", slow_build)
        try:
            assert started.wait(timeout=60)
            other = pool.submit(quick._built_once, "_pending", lambda: "quick")
            assert other.result(timeout=30) == "quick"  # not held up by the slow build
            assert not building.done()
        finally:
            release.set()
        assert building.result(timeout=60) == "slow"

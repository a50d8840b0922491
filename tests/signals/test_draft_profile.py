"""Drafts unlike the training drafts (``signals.draft_profile``), on real parts: a
draft-check gate fitted on the bundled Llama-3.1-8B HotpotQA outcomes (BM25 over their
own paragraphs) profiles its training drafts and finds the held-out recorded drafts
alike; the shipped gate, profiled on the outcomes it was fitted on, finds the embedded
SmolLM2's own drafts unlike them, warns once, and the server shows the comparison in
``/v1/stats``."""

from __future__ import annotations

import json
import logging
import re
import threading

import httpx
import numpy as np
import pytest

from adaptive_gates import DraftCheckGate, Gate, pretrained
from adaptive_gates.bundled.datasets import adarague_outcomes
from adaptive_gates.errors import GateLoadError
from adaptive_gates.models import LocalChatModel
from adaptive_gates.persistence.saved_format import CONFIG_FILE, with_checksums
from adaptive_gates.records.answer_metrics import normalize_answer
from adaptive_gates.records.data import CorpusRecord
from adaptive_gates.retrieval import BM25Retriever
from adaptive_gates.signals.draft import read_draft
from adaptive_gates.signals.draft_profile import MIN_DRAFTS, DraftProfile, DraftWatch, compare
from support.shared_data import packaged_wiki_paragraphs

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TRAIN, TEST = 300, 100
WARNING = "drafts look unlike the training drafts"


@pytest.fixture(scope="module")
def records():
    return adarague_outcomes("hotpotqa")[: TRAIN + TEST]


@pytest.fixture(scope="module")
def retriever(records) -> BM25Retriever:
    unique = dict.fromkeys((c["title"], c["text"]) for r in records for c in r.context)
    return BM25Retriever.from_records([CorpusRecord(f"h{i}", t, x) for i, (t, x) in enumerate(unique)])


@pytest.fixture(scope="module")
def fitted(records, retriever) -> DraftCheckGate:
    return DraftCheckGate(retriever=retriever, embedding=False).fit_outcomes(records[:TRAIN])


def _config(path):
    return json.loads((path / CONFIG_FILE).read_text())


def _edit_config(path, edit):
    """Change config.json and sign it again, as only a forger (or an older version) would."""
    config = _config(path)
    edit(config)
    (path / CONFIG_FILE).write_text(json.dumps(with_checksums(config)))


def test_a_fitted_gate_profiles_its_training_drafts(fitted, records):
    profile = fitted._draft_watch.training
    drafts = [r.pred_no_retrieval for r in records[:TRAIN]]
    words = np.array([len(normalize_answer(d).split()) for d in drafts])
    assert profile.drafts == TRAIN
    assert profile.mean_words == pytest.approx(words.mean()) and profile.sd_words == pytest.approx(words.std())
    assert profile.mean_log_words == pytest.approx(np.log1p(words).mean())
    # Llama's drafts: a few words, hardly a hedge, and many found in the question's own paragraphs
    assert 1.0 < profile.mean_words < 5.0 and profile.hedge_rate < 0.05
    assert 0.3 < profile.agreement_rate < 1.0 and profile.content_drafts <= TRAIN


def test_recorded_drafts_of_the_same_model_look_alike_and_warn_of_nothing(fitted, records, retriever, caplog):
    gate = DraftCheckGate(retriever=retriever, embedding=False).fit_outcomes(records[:TRAIN])
    assert gate.draft_drift_ is None  # no draft read since the fit
    with caplog.at_level(logging.WARNING):
        gate.score_records(records[TRAIN:])
    drift = gate.draft_drift_
    assert drift is not None and drift.recent.drafts == TEST and drift.judged
    assert drift.far == () and not drift.drifted
    assert WARNING not in caplog.text


def test_the_profile_is_saved_and_an_older_save_without_one_still_loads(fitted, records, retriever, tmp_path):
    fitted.save(tmp_path / "gate")
    assert _config(tmp_path / "gate")["state"]["draft_profile"] == fitted._draft_watch.training.to_dict()
    loaded = Gate.load(tmp_path / "gate", retriever=retriever)
    assert loaded._draft_watch.training == fitted._draft_watch.training
    np.testing.assert_array_equal(loaded.score_records(records[TRAIN:]), fitted.score_records(records[TRAIN:]))
    # as saved before profiles were recorded: it loads, scores the same, and compares nothing
    _edit_config(tmp_path / "gate", lambda c: c["state"].pop("draft_profile"))
    older = Gate.load(tmp_path / "gate", retriever=retriever)
    np.testing.assert_array_equal(older.score_records(records[TRAIN:]), fitted.score_records(records[TRAIN:]))
    assert older.draft_drift_ is None


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda p: p.update(drafts=-1), r"'state\.draft_profile\.drafts' must be a count"),
        (lambda p: p.update(hedge_rate=1.5), r"'state\.draft_profile\.hedge_rate' is out of range"),
        (lambda p: p.pop("sd_log_words"), r"'state\.draft_profile\.sd_log_words' must be a finite number"),
        (lambda p: p.update(content_drafts=10**6), r"'state\.draft_profile\.content_drafts' is more than"),
    ],
)
def test_a_malformed_profile_is_refused_naming_the_field(fitted, retriever, tmp_path, edit, message):
    fitted.save(tmp_path / "gate")
    _edit_config(tmp_path / "gate", lambda c: edit(c["state"]["draft_profile"]))
    with pytest.raises(GateLoadError, match=message):
        Gate.load(tmp_path / "gate", retriever=retriever)


def _profile(drafts: int, mean_log: float, sd_log: float = 0.5, hedge: float = 0.0, agree: float = 0.5):
    return DraftProfile(drafts, float(np.expm1(mean_log)), 1.0, mean_log, sd_log, hedge, drafts, agree)


def test_the_rule_needs_enough_drafts_a_clear_test_and_a_difference_that_matters():
    training = _profile(3000, 1.0)
    # far on every count, but too few drafts to judge yet
    early = compare(training, _profile(MIN_DRAFTS - 1, 2.0, hedge=0.5, agree=0.0))
    assert not early.judged and early.far == () and early.z["length"] > 3
    # many drafts: a small difference passes the test but does not matter
    small = compare(training, _profile(100_000, 1.1, hedge=0.03, agree=0.55))
    assert abs(small.z["length"]) > 3 and abs(small.z["agreement_rate"]) > 3 and small.far == ()
    # a difference that would matter, in too noisy a sample to be told from chance
    noisy = compare(training, _profile(MIN_DRAFTS, 1.3, sd_log=2.0))
    assert abs(noisy.z["length"]) < 3 and noisy.far == ()
    far = compare(training, _profile(200, 1.8, hedge=0.3, agree=0.1))
    assert far.far == ("length", "hedge_rate", "agreement_rate") and far.drifted
    assert far.describe().startswith(f"mean length {np.expm1(1.8):.1f} words against {np.expm1(1.0):.1f}")
    assert json.loads(json.dumps(far.to_dict()))["far"] == ["length", "hedge_rate", "agreement_rate"]


def test_the_watch_counts_drafts_from_many_threads_within_its_window(records, retriever):
    hits = retriever.search_batch([r.question for r in records[:40]], 3)
    readings = [
        read_draft(r.question, r.pred_no_retrieval, [h.as_passage() for h in found], [h.score for h in found])
        for r, found in zip(records, hits)
    ]
    watch = DraftWatch(DraftProfile.of(readings), "draft-check", window=100, min_drafts=50)
    threads = [threading.Thread(target=lambda: [watch.observe(readings[:5]) for _ in range(4)]) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert watch.comparison().recent.drafts == 60  # 3 threads x 4 batches x 5 drafts, none lost
    for _ in range(10):
        watch.observe(readings)
    assert watch.comparison().recent.drafts == 100  # the window keeps the last 100
    with pytest.raises(ValueError, match="window"):
        DraftWatch(watch.training, "draft-check", window=10, min_drafts=50)


# ------------------------------------------------------------------ another model's drafts

#: Questions the shipped gate drafts with SmolLM2 (each draft is a short generation).
DRAFTED = MIN_DRAFTS


@pytest.fixture(scope="module")
def paragraphs_retriever() -> BM25Retriever:
    return BM25Retriever.from_records(packaged_wiki_paragraphs())


@pytest.fixture(scope="module")
def shipped(lm, paragraphs_retriever, cached_embedder) -> DraftCheckGate:
    """The shipped gate (saved before it recorded a profile), with SmolLM2 drafting."""
    # the Llama fit kept on SmolLM2's drafts: the comparison of another model's drafts is the point
    gate = pretrained(
        "draft-check", chat=LocalChatModel(lm), retriever=paragraphs_retriever, embedder=cached_embedder, keep_fit=True
    )
    assert isinstance(gate, DraftCheckGate)
    return gate


@pytest.fixture(scope="module")
def smollm2_drafted(shipped):
    """The shipped gate profiled on (a fifth of) the outcomes it was fitted on, having
    decided ``DRAFTED`` NQ questions with SmolLM2's own drafts; the warnings logged."""
    assert shipped.draft_drift_ is None  # saved before gates recorded a profile
    records = adarague_outcomes("nq")[-2 * DRAFTED :]
    before = shipped.score_records(records)
    shipped.profile_drafts(adarague_outcomes()[::5])
    np.testing.assert_array_equal(shipped.score_records(records), before)  # the profile changes no decision
    shipped.profile_drafts(adarague_outcomes()[::5])  # a fresh comparison: the records above were counted
    handler = _Collect()
    logging.getLogger("adaptive_gates").addHandler(handler)
    try:
        decisions = shipped.decide_batch([r.question for r in records[:DRAFTED]])
        shipped.decide_batch([r.question for r in records[DRAFTED : DRAFTED + 2]])  # warned already
    finally:
        logging.getLogger("adaptive_gates").removeHandler(handler)
    return decisions, handler.messages


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_smollm2_drafts_look_unlike_the_shipped_gates_training_drafts(shipped, smollm2_drafted):
    decisions, messages = smollm2_drafted
    assert all(d.error is None for d in decisions)
    drift = shipped.draft_drift_
    assert drift.recent.drafts == DRAFTED + 2 and drift.judged
    # SmolLM2 writes sentences where Llama wrote a name or a number
    assert "length" in drift.far and drift.recent.mean_words > 2 * drift.training.mean_words
    warnings = [m for m in messages if WARNING in m]
    assert len(warnings) == 1, messages
    assert re.search(rf"mean length \d+\.\d words against {drift.training.mean_words:.1f}", warnings[0])
    assert "fit the gate on this model's outcomes" in warnings[0]


@pytest.mark.live_server
def test_the_server_shows_the_comparison_in_its_stats(shipped, smollm2_drafted, paragraphs_retriever, lm):
    from adaptive_gates.serve import ChatService
    from adaptive_gates.serve.app import create_app
    from support.serve_process import ServedApp

    service = ChatService(shipped, paragraphs_retriever, LocalChatModel(lm), max_tokens=8)
    with ServedApp(create_app(service)) as app:
        stats = httpx.get(f"{app.url}/v1/stats").json()
    drift = stats["draft_drift"]
    assert drift == json.loads(json.dumps(shipped.draft_drift_.to_dict()))
    assert "length" in drift["far"] and drift["recent"]["drafts"] == DRAFTED + 2
    # a gate that compares nothing (saved without a profile) shows no such entry
    plain = pretrained("draft-check", retriever=paragraphs_retriever, keep_fit=True)
    assert "draft_drift" not in ChatService(plain, paragraphs_retriever, LocalChatModel(lm)).stats()

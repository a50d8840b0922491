"""The gates the package ships fitted load from the installed package, decide with a
user's own backends (the embedded SmolLM2, BM25 over real Wikipedia passages that
install with the package set), and are named on the command line as
``pretrained:<name>``; nothing saves over them, and loading them writes nothing
into the package."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import adaptive_gates
from adaptive_gates import DraftCheckGate, StackedGate, load_gate, pretrained
from adaptive_gates.bundled.datasets import adarague_outcomes
from adaptive_gates.bundled.shipped import PRETRAINED, SHIPPED_MODEL, is_pretrained, pretrained_notice, pretrained_path
from adaptive_gates.cli.files import saved_gate
from adaptive_gates.errors import ShippedGateError
from adaptive_gates.models import LocalChatModel
from adaptive_gates.models.embedded import SMOLLM2_ID
from adaptive_gates.persistence.shipped_folder import SHIPPED_ROOT
from adaptive_gates.retrieval import BM25Retriever
from support.shared_data import packaged_wiki_paragraphs

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def retriever() -> BM25Retriever:
    return BM25Retriever.from_records(packaged_wiki_paragraphs()[:300])


def test_the_package_ships_its_fitted_gates_as_saved_directories():
    assert adaptive_gates.PRETRAINED == PRETRAINED
    for name in PRETRAINED:
        assert (pretrained_path(name) / "config.json").is_file(), name
        assert is_pretrained(pretrained_path(name))
    with pytest.raises(ValueError, match="no pretrained gate 'nope'; the package ships draft-check"):
        pretrained("nope")


def test_the_shipped_draft_check_gate_decides_with_the_users_backends(retriever, lm, cached_embedder, caplog):
    with caplog.at_level("WARNING", logger="adaptive_gates"):
        gate = pretrained(
            "draft-check", chat=LocalChatModel(lm), retriever=retriever, embedder=cached_embedder, keep_fit=True
        )
    assert isinstance(gate, DraftCheckGate) and gate.is_fitted and not gate.in_cold_start
    assert f"{SMOLLM2_ID}, the model it now serves" in caplog.text and "keeping that fit (keep_fit=True)" in caplog.text
    question = "Is ethanol fuel energy efficient to produce?"
    decision = gate.decide(question)
    assert decision.error is None and decision.gate == "draft-check"
    assert decision.passages == tuple(retriever.search(question, 3))
    assert decision.answer_without_retrieval == decision.details["draft"]
    # offline, on the outcomes it was fitted on: it reads every draft and ranks them
    records = adarague_outcomes("nq")[:40]
    scores = gate.score_records(records)
    assert scores.shape == (40,) and np.all((scores >= 0) & (scores <= 1)) and len(set(scores)) > 1


def test_the_command_line_names_a_shipped_gate():
    assert saved_gate("pretrained:draft-check") == pretrained_path("draft-check")
    assert saved_gate("some/dir") == Path("some/dir")
    with pytest.raises(argparse.ArgumentTypeError, match="no pretrained gate 'other'"):
        saved_gate("pretrained:other")
    assert not is_pretrained(pretrained_path("draft-check").parent)


def test_the_shipped_stacked_gate_reads_the_question_alone(cached_embedder):
    gate = pretrained("stacked", embedder=cached_embedder)
    assert isinstance(gate, StackedGate) and gate.members_ == {} and gate.embedding
    decisions = gate.decide_batch(["Who wrote the novel Dracula?", "Which river flows through the city of Ulm?"])
    for decision in decisions:
        assert decision.error is None and decision.passages is None and decision.llm_calls is None
        assert 0.0 <= decision.score <= 1.0


def _package_folders() -> dict[str, tuple[int, list[str]]]:
    """Each folder of the shipped gates: its modification time and what it holds."""
    folders = [SHIPPED_ROOT, *(pretrained_path(name) for name in PRETRAINED)]
    return {str(f): (f.stat().st_mtime_ns, sorted(p.name for p in f.iterdir())) for f in folders}


def test_loading_a_shipped_gate_writes_nothing_into_the_package(cached_embedder):
    """No lock file is made (and removed) beside the shipped gates: their folder's
    modification time stays as it was."""
    before = _package_folders()
    for _ in range(3):
        pretrained("stacked", embedder=cached_embedder)
        load_gate(pretrained_path("stacked"), embedder=cached_embedder)
    assert _package_folders() == before


def test_no_save_replaces_or_joins_a_shipped_gate(cached_embedder, tmp_path):
    gate = pretrained("stacked", embedder=cached_embedder)
    shipped_config = (pretrained_path("stacked") / "config.json").read_bytes()
    before = _package_folders()
    (tmp_path / "link").symlink_to(SHIPPED_ROOT)
    for target, overwrite in [
        (pretrained_path("stacked"), True),
        (pretrained_path("draft-check"), True),
        (SHIPPED_ROOT / "mine", False),
        (pretrained_path("stacked") / "inner", False),
        (tmp_path / "link" / "stacked", True),  # through a link
        (SHIPPED_ROOT / ".." / "pretrained" / "stacked", True),
    ]:
        with pytest.raises(ShippedGateError, match="inside the folder of the gates the package ships"):
            gate.save(target, overwrite=overwrite)
    assert _package_folders() == before
    assert (pretrained_path("stacked") / "config.json").read_bytes() == shipped_config
    assert gate.save(tmp_path / "mine").is_dir()  # anywhere else, as ever


def test_the_shipped_gates_are_llama_3_1_8b_fits_and_say_so(caplog):
    assert SHIPPED_MODEL == "meta-llama/Llama-3.1-8B-Instruct"
    assert "Llama-3.1-8B-Instruct" in (pretrained.__doc__ or "")
    for name in PRETRAINED:
        config = json.loads((pretrained_path(name) / "config.json").read_text())
        fitted_on = config.get("fitted_on")  # recorded since gates recorded it
        assert fitted_on is None or (fitted_on["model"] == SHIPPED_MODEL and fitted_on["records"] == 3000), name
    with caplog.at_level("INFO", logger="adaptive_gates"):
        pretrained("stacked")  # reads the question alone; no MiniLM loads until it decides
    assert f"pretrained:stacked is fitted on outcomes of {SHIPPED_MODEL}" in caplog.text
    assert pretrained_notice("draft-check", "llama-3.1-8b-instruct").endswith(
        "the model it now serves (llama-3.1-8b-instruct)"
    )
    assert "names no model" in pretrained_notice("draft-check", None)


def test_for_another_model_the_shipped_draft_check_starts_cold(retriever, lm, cached_embedder, caplog):
    chat = LocalChatModel(lm)
    with caplog.at_level("WARNING", logger="adaptive_gates"):
        gate = pretrained("draft-check", chat=chat, retriever=retriever, embedder=cached_embedder)
    assert f"fitted on outcomes of {SHIPPED_MODEL}, not of {SMOLLM2_ID}" in caplog.text
    assert "returning the cold-start gate" in caplog.text
    assert isinstance(gate, DraftCheckGate) and gate.in_cold_start and gate.self_report
    assert gate.retriever is retriever and gate.embedder is cached_embedder and gate.chat is chat and gate.k == 3
    assert gate.fitted_on_ is None  # nothing fitted: no Llama weights decide
    decision = gate.decide("Who wrote the novel Dracula?")
    assert decision.error is None and decision.details["cold_start"] is True
    assert decision.details["reasons"][0].startswith("cold start: ")
    assert decision.passages == tuple(retriever.search("Who wrote the novel Dracula?", 3))
    # without a chat model the embedded SmolLM2 drafts: another model too
    assert pretrained("draft-check", retriever=retriever).in_cold_start


def test_for_llama_3_1_8b_the_shipped_fit_is_kept(retriever, openai_server, caplog):
    from adaptive_gates.models.chat.openai_chat import OpenAIChatModel

    llama = OpenAIChatModel("meta-llama/Llama-3.1-8B-Instruct", base_url=openai_server.base_url)
    with caplog.at_level("WARNING", logger="adaptive_gates"):
        gate = pretrained("draft-check", chat=llama, retriever=retriever)
    assert not gate.in_cold_start and gate.is_fitted and "fitted on outcomes" not in caplog.text


#: The shipped draft-check gate's need scores of the first eight bundled NQ records
#: (BM25 over the first 300 packaged paragraphs, the embedded MiniLM), as the version
#: before the self-report, the cold start and the agreement check computed them.
SCORES_BEFORE = [
    0.3873333333333333,
    0.11608333333333333,
    0.31466666666666665,
    0.16974999999999998,
    0.13374999999999998,
    0.021166666666666667,
    0.328,
    0.5375,
]


def test_a_draft_check_gate_saved_before_the_self_report_loads_as_it_was(retriever, cached_embedder, tmp_path):
    from adaptive_gates import Gate
    from support.saved_layouts import draft_check_before_self_report

    old = draft_check_before_self_report(Path(shutil.copytree(pretrained_path("draft-check"), tmp_path / "old")))
    config = json.loads((old / "config.json").read_text())
    assert not {"self_report", "cold_start", "agreement"} & config["params"].keys()
    gate = Gate.load(old, retriever=retriever, embedder=cached_embedder)
    assert isinstance(gate, DraftCheckGate)
    assert (gate.self_report, gate.cold_start, gate.agreement) == (False, False, "always")
    assert gate.columns == tuple(config["state"]["combiner"]["feature_names"]) and "agree_any" in gate.columns
    assert gate.prompt("Who?") == 'Answer the following question with one or few words.\nQuestion: "Who?"'
    assert gate.threshold_ == config["threshold"]
    np.testing.assert_allclose(gate.score_records(adarague_outcomes("nq")[:8]), SCORES_BEFORE, rtol=1e-9)

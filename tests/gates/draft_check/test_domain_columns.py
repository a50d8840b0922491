"""A domain indicator for the draft-check gate (``gates.domain_columns``), on real
parts: the bundled Llama-3.1-8B outcomes of two tasks (each record names its task),
BM25 over real Wikipedia paragraphs, the embedded SmolLM2 drafting where the gate
decides; fitted, saved, loaded, set for serving, from the command line and in the
server."""

from __future__ import annotations

import json
import logging
from dataclasses import replace

import numpy as np
import pytest

from adaptive_gates import DraftCheckGate, Gate
from adaptive_gates.bundled.datasets import ADARAGUE_TASKS, TASK_FIELD, adarague_outcomes
from adaptive_gates.cli import main
from adaptive_gates.errors import GateLoadError, UsageError
from adaptive_gates.models import LocalChatModel
from adaptive_gates.persistence.saved_format import CONFIG_FILE, with_checksums
from adaptive_gates.records.data import write_jsonl
from adaptive_gates.retrieval import BM25Retriever
from support.shared_data import packaged_wiki_paragraphs

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: Records per task fitted on and held out; records fitted on without a domain.
TRAIN, TEST, WITHOUT = 150, 40, 30
UNKNOWN = "was not fitted on"


@pytest.fixture(scope="module")
def tasks():
    return {t: adarague_outcomes(t)[: TRAIN + TEST] for t in ("nq", "trivia")}


@pytest.fixture(scope="module")
def train(tasks):
    """Two tasks' records, and some of a third whose task field is dropped (domain 'other')."""
    missing = [
        replace(r, extra={k: v for k, v in r.extra.items() if k != TASK_FIELD})
        for r in adarague_outcomes("musique")[:WITHOUT]
    ]
    return [r for rows in tasks.values() for r in rows[:TRAIN]] + missing


@pytest.fixture(scope="module")
def held_out(tasks):
    return tasks["nq"][TRAIN:]


@pytest.fixture(scope="module")
def paragraphs():
    return packaged_wiki_paragraphs()[:800]


@pytest.fixture(scope="module")
def retriever(paragraphs) -> BM25Retriever:
    return BM25Retriever.from_records(paragraphs)


@pytest.fixture(scope="module")
def fitted(train, retriever, lm) -> DraftCheckGate:
    gate = DraftCheckGate(LocalChatModel(lm), retriever, embedding=False, max_tokens=8, domain_field=TASK_FIELD)
    return gate.fit_outcomes(train)


def _edit_config(path, edit):
    """Change config.json and sign it again, as only a forger (or an older version) would."""
    config = json.loads((path / CONFIG_FILE).read_text())
    edit(config)
    (path / CONFIG_FILE).write_text(json.dumps(with_checksums(config)))


def test_the_bundled_records_name_their_task_and_write_it():
    for task in ADARAGUE_TASKS:
        record = adarague_outcomes(task)[0]
        assert record.extra[TASK_FIELD] == task and record.to_json()[TASK_FIELD] == task


def test_the_combiner_reads_one_hot_domain_columns(fitted, held_out):
    assert fitted.domains_ == ("nq", "trivia")
    names = fitted.combiner_.feature_names
    assert names[-3:] == ("domain=nq", "domain=trivia", "domain=other") and names[:-3] == fitted.columns
    # offline, a record's own field is its domain: the same drafts read as another task score otherwise
    as_trivia = [replace(r, extra={**r.extra, TASK_FIELD: "trivia"}) for r in held_out]
    nq, trivia = fitted.score_records(held_out), fitted.score_records(as_trivia)
    assert np.all(np.isfinite(nq)) and not np.array_equal(nq, trivia)


def test_a_record_without_a_domain_reads_as_other_logged_once(train, retriever, held_out, caplog):
    gate = DraftCheckGate(retriever=retriever, embedding=False, domain_field=TASK_FIELD).fit_outcomes(train)
    without = [replace(r, extra={}) for r in held_out]
    as_other = [replace(r, extra={TASK_FIELD: "other"}) for r in held_out]
    with caplog.at_level(logging.WARNING):
        scores = gate.score_records(without)
        gate.score_records(without)
    np.testing.assert_array_equal(scores, gate.score_records(as_other))
    assert caplog.text.count("questions of no domain (set domain=) read as 'other'") == 1
    with pytest.raises(ValueError, match="no outcome record has the domain field 'topic'"):
        DraftCheckGate(retriever=retriever, embedding=False, domain_field="topic").fit_outcomes(train)


def test_the_deployments_domain_is_a_serving_parameter(fitted, held_out, caplog):
    questions = [r.question for r in held_out[:2]]
    combiner = fitted.combiner_
    try:
        fitted.set_params(domain="nq")
        assert fitted.combiner_ is combiner  # a serving parameter: nothing fitted is dropped
        nq = fitted.decide_batch(questions)
        fitted.set_params(domain="trivia")
        trivia = fitted.decide_batch(questions)
        assert [d.details["domain"] for d in nq + trivia] == ["nq", "nq", "trivia", "trivia"]
        assert [d.details["draft"] for d in nq] == [d.details["draft"] for d in trivia]  # the same drafts ...
        assert [d.score for d in nq] != [d.score for d in trivia]  # ... read in another domain
        fitted.set_params(domain="bioasq")
        with caplog.at_level(logging.WARNING):
            unknown = fitted.decide_batch(questions) + fitted.decide_batch(questions)
        assert {d.details["domain"] for d in unknown} == {"other"}
        assert caplog.text.count("questions of domain 'bioasq' read as 'other'") == 1
    finally:
        fitted.set_params(domain=None)
    with pytest.raises(ValueError, match="give domain_field= too"):
        DraftCheckGate(domain="nq")


def test_a_saved_gate_keeps_its_domains_and_refuses_a_malformed_list(fitted, held_out, retriever, tmp_path):
    path = fitted.save(tmp_path / "gate")
    assert json.loads((path / CONFIG_FILE).read_text())["state"]["domains"] == ["nq", "trivia"]
    loaded = Gate.load(path, retriever=retriever)
    assert loaded.domains_ == ("nq", "trivia")
    np.testing.assert_array_equal(loaded.score_records(held_out), fitted.score_records(held_out))
    for domains, says in (
        ("nq", "must list the domains fitted on"),
        (["nq", ""], "must list the domains fitted on"),
        (["nq", "nq"], "must list distinct domains in sorted order"),
        (["trivia", "nq"], "must list distinct domains in sorted order"),
        (["nq", "other"], "must list distinct domains in sorted order"),
        (None, "must list the domains fitted on"),
    ):
        broken = tmp_path / f"broken-{len(list(tmp_path.iterdir()))}"
        fitted.save(broken)
        _edit_config(broken, lambda c, d=domains: c["state"].update(domains=d))
        with pytest.raises(GateLoadError, match=rf"field 'state\.domains' {says}"):
            Gate.load(broken, retriever=retriever)
    # domains saved for a gate whose parameters say it has none
    _edit_config(path, lambda c: c["params"].update(domain_field=None))
    with pytest.raises(GateLoadError, match=r"'state\.domains' is set, but 'params\.domain_field' is null"):
        Gate.load(path, retriever=retriever)


@pytest.fixture(scope="module")
def files(train, held_out, paragraphs, tmp_path_factory):
    folder = tmp_path_factory.mktemp("domain-files")
    write_jsonl(folder / "train.jsonl", [r.to_json() for r in train])
    write_jsonl(folder / "test.jsonl", [r.to_json() for r in held_out])
    write_jsonl(folder / "corpus.jsonl", [{"id": p.id, "title": p.title, "text": p.text} for p in paragraphs])
    return folder


def test_the_command_line_fits_and_evaluates_with_a_domain_option(files, tmp_path):
    options = ["--option", "domain_field=task", "--option", "embedding=false"]
    data = ["--train", str(files / "train.jsonl"), "--corpus", str(files / "corpus.jsonl")]
    assert main(["fit", "--gate", "draft-check", *data, *options, "--out", str(tmp_path / "g")]) == 0
    loaded = Gate.load(tmp_path / "g", retriever=BM25Retriever.from_jsonl(files / "corpus.jsonl"))
    assert loaded.domains_ == ("nq", "trivia") and loaded.domain_field == "task"
    report = tmp_path / "report.json"
    evaluate = ["eval", "--gate", "draft-check", *data, "--test", str(files / "test.jsonl"), "--json", str(report)]
    assert main([*evaluate, *options]) == 0
    assert np.isfinite(json.loads(report.read_text())["gap_capture"])


@pytest.mark.live_server
def test_the_server_reads_its_questions_in_the_domain_it_is_given(fitted, files, tmp_path):
    from adaptive_gates.cli.command import build_parser
    from adaptive_gates.cli.serve import build_service
    from support.serve_process import ask, command_in_process

    fitted.save(tmp_path / "gate")
    served = ["--gate", str(tmp_path / "gate"), "--corpus", str(files / "corpus.jsonl"), "--retriever", "bm25"]
    with command_in_process(*served, "--domain", "trivia", "--no-save", "--max-tokens", "4") as server:
        reply = ask(server.url, "who wrote the novel dracula", max_tokens=1)
    assert reply.json()["adaptive_gates"]["decision"]["details"]["domain"] == "trivia"
    shipped = ["--gate", "pretrained:draft-check", "--corpus", str(files / "corpus.jsonl"), "--retriever", "bm25"]
    with pytest.raises(
        UsageError, match=r"--domain: the draft-check gate at .* was not fitted with a domain indicator"
    ):
        build_service(build_parser().parse_args(["serve", *shipped, "--domain", "nq"]))

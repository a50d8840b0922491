"""``adaptive-gates eval`` beyond a train and a test file: cross-fitted on one file
(``--folds``), a saved or shipped gate scored as it is, fitted on agreement labels
(records without gold answers), and each question's decision (``--decisions``).

The files are the bundled AdaRAGUE outcomes (Llama-3.1-8B on NQ); the records
"without gold" are other NQ questions written with ``"answers": []`` and another
model's name, as ``adaptive-gates collect`` on a user's own questions would give them.
"""

import json

import numpy as np
import pytest

from adaptive_gates import PopularityGate, load_gate, load_outcomes
from adaptive_gates.bundled.datasets import ADARAGUE_TASKS, adarague_outcomes, adarague_path
from adaptive_gates.bundled.shipped import pretrained_path
from adaptive_gates.cli import main
from adaptive_gates.evaluation import evaluate_scores, random_band
from adaptive_gates.gates.base.folds import cross_fitted_scores, fold_splits
from adaptive_gates.records.data import write_jsonl
from adaptive_gates.records.selfknowledge import agreement_records, outcome_scores

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PREFIX = "adaptive-gates: error: "
WARNING = "adaptive-gates: warning: "
#: The question-only stacked gate without its embedding: the quickest gate that learns.
QUICK = ["--gate", "stacked", "--option", "members=", "--option", "embedding=false", "--option", "model=logistic"]
OTHER_LLM = "acme/Other-LLM-7B"
TRAIN, TEST, NO_GOLD = 150, 60, 150


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("modes")
    nq = adarague_outcomes("nq")
    write_jsonl(root / "train.jsonl", [r.to_json() for r in nq[:TRAIN]])
    write_jsonl(root / "test.jsonl", [r.to_json() for r in nq[400 : 400 + TEST]])
    plain = nq[TRAIN : TRAIN + NO_GOLD]
    write_jsonl(root / "nogold.jsonl", [{**r.to_json(), "answers": [], "llm": OTHER_LLM} for r in plain])
    return root


@pytest.fixture(scope="module")
def saved_quick(files, tmp_path_factory):
    """The quick stacked gate fitted on train.jsonl and calibrated for a 30% rate."""
    out = tmp_path_factory.mktemp("saved") / "gate"
    assert main(["fit", *QUICK, "--train", str(files / "train.jsonl"), "--out", str(out), "--target-rate", "0.3"]) == 0
    return out


def _eval(*argv):
    return main(["eval", *map(str, argv)])


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_eval_cross_fits_one_file_and_writes_each_decision_with_its_fold(files, tmp_path, capsys):
    out, decisions = tmp_path / "r.json", tmp_path / "d.jsonl"
    argv = ["--gate", "popularity", "--train", files / "train.jsonl", "--folds", 4, "--seed", 3]
    assert _eval(*argv, "--json", out, "--decisions", decisions) == 0
    report = json.loads(out.read_text())
    records = load_outcomes(files / "train.jsonl")
    assert report["n"] == TRAIN and report["n_folds"] == 4 and report["seed"] == 3
    assert report["labels"] == "gold" and report["judged_by"] == "gold" and len(report["thresholds"]) == 4

    # the scores are cross_fitted_scores' with the same folds, and the report evaluate_scores'
    expected = cross_fitted_scores(PopularityGate, records, "contains", 4, 3)
    a, b = outcome_scores(records)
    rows = _lines(decisions)
    assert [r["id"] for r in rows] == [r.id for r in records]
    assert [r["question"] for r in rows] == [r.question for r in records]
    np.testing.assert_allclose([r["score"] for r in rows], expected)
    assert report["gap_capture"] == pytest.approx(evaluate_scores(expected, a, b, gate="p", metric="c")["gap_capture"])
    retrieve = np.array([r["retrieve"] for r in rows])
    assert report["random_band"] == random_band(a, b, retrieve)

    # each question was held out by the fold fold_splits gives it, and decided at that fold's threshold
    fold = np.empty(TRAIN, dtype=int)
    for index, (_, held_out) in enumerate(fold_splits(TRAIN, 4, 3)):
        fold[held_out] = index
    assert [r["fold"] for r in rows] == fold.tolist()
    thresholds = np.array(report["thresholds"])[fold]
    np.testing.assert_array_equal(retrieve, expected > thresholds)
    assert report["at_threshold"]["retrieval_rate"] == pytest.approx(retrieve.mean())
    line = capsys.readouterr().out
    assert line.startswith(f"popularity: n={TRAIN} ")
    assert "| fitted on gold labels, judged by gold, cross-fitted in 4 folds (seed 3)" in line


def test_eval_cross_fitted_for_a_target_rate_calibrates_each_fold_for_it(files, tmp_path):
    out = tmp_path / "r.json"
    assert _eval(*QUICK, "--train", files / "train.jsonl", "--target-rate", 0.3, "--json", out) == 0
    report = json.loads(out.read_text())
    assert report["n_folds"] == 5 and report["seed"] == 0  # the defaults
    assert report["at_threshold"]["target_rate"] == 0.3
    # each fold's threshold retrieves 30% of the other folds' scores; on the held-out fold, about as many
    assert abs(report["at_threshold"]["retrieval_rate"] - 0.3) < 0.1


def test_eval_fits_on_agreement_labels_and_judges_a_gold_test_by_gold(files, tmp_path, capsys):
    out = tmp_path / "r.json"
    argv = [*QUICK, "--labels", "agreement", "--train", files / "nogold.jsonl", "--test", files / "test.jsonl"]
    assert _eval(*argv, "--json", out) == 0
    report = json.loads(out.read_text())
    assert report["labels"] == "agreement" and report["judged_by"] == "gold" and report["n_train"] == NO_GOLD
    fitted_on = report["fitted_on"]
    assert fitted_on["labels"] == "agreement" and fitted_on["model"] == OTHER_LLM
    assert fitted_on["sources"] == [str(files / "nogold.jsonl")] and fitted_on["records"] == NO_GOLD
    # fitted on another model's outcomes than the test's: said in the report and on stderr
    mismatch = report["model_mismatch"]
    assert mismatch["fitted_on"] == OTHER_LLM and mismatch["judged_on"] == "meta-llama/Llama-3.1-8B-Instruct"
    captured = capsys.readouterr()
    assert captured.err == f"{WARNING}{mismatch['message']}\n"
    assert "| fitted on agreement labels, judged by gold" in captured.out


def test_eval_cross_fits_records_without_gold_and_judges_them_by_agreement(files, tmp_path, capsys):
    out = tmp_path / "r.json"
    argv = [*QUICK, "--labels", "agreement", "--train", files / "nogold.jsonl", "--folds", 3, "--json", out]
    assert _eval(*argv) == 0
    report = json.loads(out.read_text())
    assert report["judged_by"] == "agreement" and report["labels"] == "agreement"
    # agreement: right without retrieval where the two answers agree; with it, right unless empty
    a, b = outcome_scores(agreement_records(load_outcomes(files / "nogold.jsonl")))
    assert report["never"] == pytest.approx(a.mean()) and report["always"] == pytest.approx(b.mean())
    assert report["never"] < report["always"]
    assert (
        "| fitted on agreement labels, judged by agreement, cross-fitted in 3 folds (seed 0)" in capsys.readouterr().out
    )


def test_eval_scores_a_saved_gate_as_it_is_on_another_models_records(files, saved_quick, tmp_path, capsys):
    before = {p.name: p.read_bytes() for p in saved_quick.iterdir() if p.is_file()}
    out, decisions = tmp_path / "r.json", tmp_path / "d.jsonl"
    assert _eval("--gate", saved_quick, "--test", files / "nogold.jsonl", "--json", out, "--decisions", decisions) == 0
    assert {p.name: p.read_bytes() for p in saved_quick.iterdir() if p.is_file()} == before  # nothing refitted

    gate = load_gate(saved_quick)
    records = load_outcomes(files / "nogold.jsonl")
    report = json.loads(out.read_text())
    assert report["threshold"] == gate.threshold_ and report["threshold_from"] == "gate"
    assert report["fitted_on"] == gate.fitted_on_.to_dict() and report["labels"] == "gold"
    assert report["judged_by"] == "agreement" and "n_train" not in report
    rows = _lines(decisions)
    assert all("fold" not in r for r in rows) and [r["id"] for r in rows] == [r.id for r in records]
    scores = gate.score_records(records)
    np.testing.assert_allclose([r["score"] for r in rows], scores)
    assert [r["retrieve"] for r in rows] == (scores > gate.threshold_).tolist()

    assert report["model_mismatch"]["fitted_on"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert report["model_mismatch"]["judged_on"] == OTHER_LLM
    captured = capsys.readouterr()
    assert captured.err == f"{WARNING}{report['model_mismatch']['message']}\n"
    assert f"the gate was fitted on {gate.fitted_on_.describe()}" in captured.out
    assert "| fitted on gold labels, judged by agreement" in captured.out


def test_a_saved_gates_threshold_for_a_rate_comes_from_its_calibration(files, saved_quick, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert _eval("--gate", saved_quick, "--test", files / "test.jsonl", "--target-rate", 0.5, "--json", out) == 0
    report = json.loads(out.read_text())
    assert report["threshold"] == load_gate(saved_quick).threshold_at_rate(0.5)
    assert report["threshold_from"] == "calibration" and report["at_threshold"]["target_rate"] == 0.5
    assert "model_mismatch" not in report and capsys.readouterr().err == ""  # the same model's answers


def test_a_shipped_gate_is_scored_on_the_test_with_its_rate_read_from_the_test_questions(files, tmp_path):
    out = tmp_path / "r.json"
    assert (
        _eval("--gate", "pretrained:stacked", "--test", files / "test.jsonl", "--target-rate", 0.3, "--json", out) == 0
    )
    report = json.loads(out.read_text())
    assert report["gate"] == "stacked" and report["n"] == TEST and report["gate_location"] == "pretrained:stacked"
    # never calibrated: the threshold is the test scores' quantile for the rate (no outcome read)
    assert report["threshold_from"] == "test questions"
    assert abs(report["at_threshold"]["retrieval_rate"] - 0.3) <= 1 / TEST


@pytest.mark.parametrize("test", ["bundled:squad", "packaged file"])
def test_a_shipped_gate_is_not_scored_on_the_bundled_splits_it_was_fitted_on(tmp_path, capsys, test):
    """The shipped gates learnt from all six packaged splits: a figure there would be of
    their training records, as --test equal to --train would be."""
    if test == "packaged file":
        test = tmp_path / "linked.jsonl.gz"
        test.symlink_to(adarague_path("squad"))
    out = tmp_path / "r.json"
    assert _eval("--gate", "pretrained:stacked", "--test", test, "--json", out) == 2
    assert "--test bundled:squad: --gate pretrained:stacked was fitted on the package's AdaRAGUE splits" in (
        capsys.readouterr().err
    )
    assert not out.exists()


def test_a_bundled_name_reads_the_same_records_as_the_packaged_file(tmp_path):
    named, by_path = tmp_path / "named.json", tmp_path / "path.json"
    assert (
        _eval(
            "--gate",
            "popularity",
            "--train",
            "bundled:nq",
            "bundled:trivia",
            "--test",
            "bundled:musique",
            "--json",
            named,
        )
        == 0
    )
    train = [adarague_path("nq"), adarague_path("trivia")]
    assert _eval("--gate", "popularity", "--train", *train, "--test", adarague_path("musique"), "--json", by_path) == 0
    assert json.loads(named.read_text()) == json.loads(by_path.read_text())
    assert json.loads(named.read_text())["n"] == 500


def test_an_unknown_bundled_name_lists_the_names(tmp_path, capsys):
    assert (
        _eval(
            "--gate", "popularity", "--train", "bundled:nq", "--test", "bundled:hotpot", "--json", tmp_path / "r.json"
        )
        == 2
    )
    names = ", ".join(f"bundled:{task}" for task in ADARAGUE_TASKS)
    assert capsys.readouterr().err == (
        f"{PREFIX}argument --test: no bundled data set 'bundled:hotpot'; the package ships {names}\n"
    )


def test_the_shipped_draft_check_gate_retrieves_over_the_corpus_given(files, corpus_path, tmp_path):
    test = tmp_path / "few.jsonl"
    write_jsonl(test, [r.to_json() for r in load_outcomes(files / "test.jsonl")[:12]])
    out, decisions = tmp_path / "r.json", tmp_path / "d.jsonl"
    argv = ["--gate", "pretrained:draft-check", "--test", test, "--corpus", corpus_path, "--json", out]
    assert _eval(*argv, "--decisions", decisions) == 0
    report = json.loads(out.read_text())
    assert report["gate"] == "draft-check" and report["n"] == 12
    assert report["retrieval_calls"] == 1.0  # it retrieves for every question to decide
    rows = _lines(decisions)
    assert len(rows) == 12 and all(0.0 <= r["score"] <= 1.0 for r in rows)


def test_gold_labels_refuse_training_records_without_gold_answers(files, tmp_path, capsys):
    argv = [*QUICK, "--train", files / "nogold.jsonl", "--test", files / "test.jsonl", "--json", tmp_path / "r.json"]
    assert _eval(*argv) == 2
    assert capsys.readouterr().err == (
        f'{PREFIX}--train: {NO_GOLD} of {NO_GOLD} records have no gold answer ("answers": []); '
        "fit on them with --labels agreement (the answer with retrieval as the reference)\n"
    )
    assert not (tmp_path / "r.json").exists()


def _bad_invocations():
    """(argv with {train}, {test}, {saved}, {corpus} and {out} placeholders, what the one line says)."""
    test = ["--test", "{test}", "--json", "{out}/r.json"]
    split = ["eval", "--gate", "skr-knn", "--train", "{train}", *test]
    crossed = ["eval", "--gate", "skr-knn", "--train", "{train}", "--json", "{out}/r.json"]
    saved = ["eval", "--gate", "{saved}", *test]
    live = ["eval", "--live", "--gate", "verbalized", "--test", "{test}", "--corpus", "{corpus}", "--json", "x"]
    return [
        ([*split, "--folds", "3"], "--folds, --seed: a cross-fitted report is of --train alone; give --test or"),
        ([*split, "--seed", "1"], "--folds, --seed: a cross-fitted report is of --train alone"),
        ([*crossed, "--folds", "1"], "argument --folds: must be an integer of at least 2, got '1'"),
        ([*crossed, "--folds", "x"], "argument --folds: must be an integer of at least 2, got 'x'"),
        ([*crossed, "--limit", "3"], "--limit: only with --live"),
        (["eval", "--gate", "skr-knn", "--json", "{out}/r.json"], "--train is required"),
        ([*saved, "--train", "{train}"], "--train: --gate {saved} is a saved gate, scored as it is"),
        (["eval", "--gate", "{saved}", "--json", "{out}/r.json"], "--gate {saved} is a saved gate: give --test"),
        ([*saved, "--option", "k=3"], "--option: --gate {saved} is a saved gate, scored as it was fitted"),
        ([*saved, "--labels", "agreement"], "--labels: --gate {saved} is a saved gate, scored as it was fitted"),
        ([*saved, "--folds", "3"], "--folds, --seed: --gate {saved} is a saved gate; nothing is cross-fitted"),
        ([*saved, "--corpus", "{corpus}"], "--corpus: gate 'stacked' retrieves nothing to decide"),
        (["eval", "--gate", "pretrained:draft-check", *test], "gate 'draft-check' needs --corpus"),
        (["eval", "--gate", "pretrained:nope", *test], "--gate: no pretrained gate 'nope'; the package ships"),
        ([*live, "--folds", "3"], "--folds, --seed and --decisions go with offline evaluation, not --live"),
        ([*live, "--decisions", "{out}/d.jsonl"], "--folds, --seed and --decisions go with offline evaluation"),
        (
            ["eval", "--live", "--gate", "{saved}", *test, "--corpus", "{corpus}"],
            "--live: --gate {saved} is a saved gate, scored offline",
        ),
        (
            ["eval", *QUICK, "--labels", "agreement", "--option", "target=gain", "--train", "{train}", *test],
            "--option target=gain: with --labels agreement the answer with retrieval is the reference",
        ),
        ([*split, "--labels", "silver"], "argument --labels: invalid choice: 'silver'"),
        ([*split, "--decisions", "{test}"], "--decisions {test} is the same file as --test {test}"),
    ]


@pytest.mark.parametrize("argv, message", _bad_invocations())
def test_bad_combinations_fail_with_one_line_before_any_work(
    files, corpus_path, tmp_path, capsys, no_work, argv, message
):
    places = {
        "train": files / "train.jsonl",
        "test": files / "test.jsonl",
        "saved": pretrained_path("stacked"),
        "corpus": corpus_path,
        "out": tmp_path,
    }
    assert main([a.format(**places) for a in argv]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(PREFIX), captured.err
    assert message.format(**places) in lines[0]
    assert captured.out == ""

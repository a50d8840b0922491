"""The ``adaptive-gates`` command end to end: every subcommand on a few real records, and
every mistake on its command line reported alike, before any work."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from adaptive_gates import SKRClassifierGate, SKRKnnGate, load_outcomes
from adaptive_gates.bundled.shipped import pretrained_path
from adaptive_gates.cli import main
from adaptive_gates.evaluation import random_band
from adaptive_gates.gates.base.gate import Gate
from adaptive_gates.records.answer_metrics import exact_match, get_metric
from adaptive_gates.records.data import OutcomeRecord, load_corpus, write_jsonl

pytestmark = pytest.mark.usefixtures("one_torch_thread")

REPORT_FIELDS = {
    "gate",
    "n",
    "metric",
    "never",
    "always",
    "oracle",
    "auc",
    "auc_random",
    "auc_oracle",
    "gap_capture",
    "decision_auroc",
    "curve",
    "at_threshold",
}
PREFIX = "adaptive-gates: error: "
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def qa_file(outcome_records, tmp_path_factory):
    """Three real questions with their gold answers, as QA records."""
    path = tmp_path_factory.mktemp("qa") / "qa.jsonl"
    write_jsonl(path, [{"id": r.id, "question": r.question, "answers": r.answers} for r in outcome_records[-3:]])
    return path


def _achievable_rates(scores: np.ndarray) -> list[float]:
    """The retrieval rates a threshold can give on these scores (tied questions go together)."""
    return sorted({0.0} | {float(np.mean(scores >= v)) for v in np.unique(scores)})


@pytest.mark.parametrize(
    "gate, options", [("skr-knn", {}), ("skr-cls", {}), ("skr-knn", {"k": 20, "vote": "majority"})]
)
def test_eval_writes_the_report(split, cached_embedder, tmp_path, capsys, gate, options):
    out, plot = tmp_path / "r.json", tmp_path / "r.png"
    flags = [f for key, value in options.items() for f in ("--option", f"{key}={value}")]
    code = main(
        [
            "eval",
            "--gate",
            gate,
            "--train",
            str(split / "train.jsonl"),
            "--test",
            str(split / "test.jsonl"),
            "--json",
            str(out),
            "--plot",
            str(plot),
            "--target-rate",
            "0.3",
            *flags,
        ]
    )
    assert code == 0
    report = json.loads(out.read_text())
    test = load_outcomes(split / "test.jsonl")
    assert set(report) >= REPORT_FIELDS
    assert report["gate"] == gate and report["n"] == len(test) and report["metric"] == "contains"
    assert len(report["curve"]) == len(test) + 1
    assert report["curve"][0] == pytest.approx([0.0, report["never"]], abs=1e-6)  # the curve is rounded
    assert report["curve"][-1][1] == pytest.approx(report["always"])
    assert report["auc_random"] <= report["auc_oracle"] and report["never"] <= report["oracle"]
    assert plot.read_bytes()[:4] == b"\x89PNG"
    assert capsys.readouterr().out.startswith(f"{gate}: n={len(test)} ")

    # The realised rate is the target's, as far as ties allow: the threshold was set on
    # the training questions, so on the test questions it lands on one of the tie blocks
    # around the target, give or take the sampling noise of a share of len(test).
    at = report["at_threshold"]
    assert at["target_rate"] == 0.3
    # The same MiniLM as the command's, behind the session's memo: the parameters share its embeddings.
    scores = (
        Gate.gate_class(gate)(cached_embedder, **options)
        .fit_outcomes(load_outcomes(split / "train.jsonl"))
        .score([r.question for r in test])
    )
    rates = _achievable_rates(np.asarray(scores))
    below, above = max(r for r in rates if r <= 0.3), min(r for r in rates if r >= 0.3)
    noise = 3 * math.sqrt(0.3 * 0.7 / len(test))
    assert below - noise <= at["retrieval_rate"] <= above + noise


# Hand-set outcomes of six test questions: right without retrieval on q0-q2 and q5, with
# it on q1, q2 and q4. Never 4/6 beats always 3/6, so no retrieval call is needed to match it.
HAND_A = np.array([1, 1, 1, 0, 0, 1])
HAND_B = np.array([0, 1, 1, 0, 1, 0])


def test_eval_reports_the_fields_units_on_hand_set_outcomes(split, outcome_records, tmp_path, capsys):
    test = [
        OutcomeRecord(r.id, r.question, r.answers, r.answers[0] if x else "no idea", r.answers[0] if y else "no idea")
        for r, x, y in zip(outcome_records[-6:], HAND_A, HAND_B)
    ]
    write_jsonl(tmp_path / "test.jsonl", [r.to_json() for r in test])
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "eval",
                "--gate",
                "skr-knn",
                "--train",
                str(split / "train.jsonl"),
                "--test",
                str(tmp_path / "test.jsonl"),
                "--json",
                str(out),
            ]
        )
        == 0
    )
    report = json.loads(out.read_text())

    gate = SKRKnnGate().fit_outcomes(load_outcomes(split / "train.jsonl"))
    retrieve = np.asarray(gate.retrieves(gate.score([r.question for r in test])), dtype=bool)
    assert report["never"] == pytest.approx(4 / 6) and report["always"] == pytest.approx(3 / 6)
    assert report["in_accuracy"] == pytest.approx(np.where(retrieve, HAND_B, HAND_A).mean())
    assert report["retrieval_calls"] == pytest.approx(retrieve.mean())
    assert report["lm_calls"] == 1.0  # SKR-kNN reads the question only: one answer per question
    assert report["calls_to_match_always"] == 0.0
    assert report["random_band"] == random_band(HAND_A, HAND_B, retrieve)
    printed = capsys.readouterr().out
    assert (
        f"in_accuracy={report['in_accuracy']:.3f} retrieval_calls={retrieve.mean():.3f}/q lm_calls=1.000/q" in printed
    )
    assert "calls_to_match_always=0.000/q | random 95%: gap_capture=[" in printed


def test_eval_with_em_metric_and_rule_threshold(split, tmp_path):
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "eval",
                "--gate",
                "skr-knn",
                "--train",
                str(split / "train.jsonl"),
                "--test",
                str(split / "test.jsonl"),
                "--json",
                str(out),
                "--metric",
                "em",
            ]
        )
        == 0
    )
    report = json.loads(out.read_text())
    assert report["metric"] == "em" and report["at_threshold"]["target_rate"] is None


def test_fit_saves_a_calibrated_gate(split, tmp_path, capsys):
    out = tmp_path / "gate"
    assert (
        main(
            [
                "fit",
                "--gate",
                "skr-knn",
                "--train",
                str(split / "train.jsonl"),
                "--out",
                str(out),
                "--option",
                "weighting=similarity",
                "--objective",
                "--max-rate",
                "0.4",
            ]
        )
        == 0
    )
    gate = SKRKnnGate.load(out)
    assert gate.weighting == "similarity" and gate.calibration_.method == "objective"
    assert gate.calibration_.realised_rate <= 0.4
    assert f"saved {gate!r} to {out}" in capsys.readouterr().out


def test_fit_calibrates_for_the_target_rate(split, tmp_path):
    # The classifier's out-of-fold probabilities have no ties: the rate lands within one question.
    out = tmp_path / "gate"
    assert (
        main(
            [
                "fit",
                "--gate",
                "skr-cls",
                "--train",
                str(split / "train.jsonl"),
                "--out",
                str(out),
                "--target-rate",
                "0.3",
            ]
        )
        == 0
    )
    calibration = SKRClassifierGate.load(out).calibration_
    n_train = len(load_outcomes(split / "train.jsonl"))
    assert calibration.method == "rate" and calibration.target_rate == 0.3
    assert abs(calibration.realised_rate - 0.3) <= 1 / n_train


def test_eval_live_answers_and_decides(qa_file, corpus_path, tmp_path, capsys):
    out = tmp_path / "live.json"
    assert (
        main(
            [
                "eval",
                "--live",
                "--gate",
                "verbalized",
                "--test",
                str(qa_file),
                "--corpus",
                str(corpus_path),
                "--json",
                str(out),
                "--limit",
                "2",
                "--k",
                "2",
                "--batch-size",
                "2",
            ]
        )
        == 0
    )
    report = json.loads(out.read_text())
    qa = [json.loads(line) for line in qa_file.read_text().splitlines()]
    corpus_ids = {r.id for r in load_corpus(corpus_path)}
    assert report["mode"] == "live" and report["gate"] == "verbalized" and report["n"] == 2
    rows = report["questions"]
    assert [r["id"] for r in rows] == [q["id"] for q in qa[:2]]
    contains = get_metric("contains")
    for row in rows:
        assert len(row["retrieved"]) == 2 and set(row["retrieved"]) <= corpus_ids
        assert row["correct_without"] == contains(row["answer_without"], row["answers"])
        assert row["correct_with"] == contains(row["answer_with"], row["answers"])
    assert report["retrieval_calls"] == sum(r["retrieve"] for r in rows) / 2
    assert report["drafts_reused"] + report["llm_answer_calls"] == 2
    # The verbalized gate asks the LLM first: its own calls, plus an answer where it retrieves
    # or its draft was unusable.
    spent = [r["llm_calls"] + (r["retrieve"] or not (r["details"].get("answer") or "").strip()) for r in rows]
    assert report["lm_calls"] == pytest.approx(sum(spent) / 2) and report["lm_calls"] >= 1
    printed = capsys.readouterr().out
    assert printed.startswith("verbalized: n=2 ") and "alignment:" in printed


#: The live log-prob gate's answer cap (its default is 24).
ANSWER_TOKENS = 3


def test_eval_live_with_the_logprob_gate_answers_both_ways_with_its_prompt(qa_file, corpus_path, tmp_path):
    from adaptive_gates.answering.answerer import LLMAnswerer
    from adaptive_gates.retrieval import BM25Retriever

    out = tmp_path / "live.json"
    assert (
        main(
            [
                "eval",
                "--live",
                "--gate",
                "logprob",
                "--test",
                str(qa_file),
                "--corpus",
                str(corpus_path),
                "--json",
                str(out),
                "--limit",
                "2",
                "--k",
                "2",
                "--batch-size",
                "2",
                # the answers' length proves nothing here: a short cap keeps the four generations cheap
                "--option",
                f"max_tokens={ANSWER_TOKENS}",
            ]
        )
        == 0
    )
    rows = json.loads(out.read_text())["questions"]
    # the package's answer prompt and the gate's cap, as the gate drafts with them
    answerer = LLMAnswerer(max_new_tokens=ANSWER_TOKENS)
    questions = [r["question"] for r in rows]
    hits = BM25Retriever.from_jsonl(corpus_path).search_batch(questions, k=2)
    passages = [[h.as_passage() for h in row] for row in hits]
    assert [r["answer_without"] for r in rows] == answerer.answer_batch(questions)
    assert [r["answer_with"] for r in rows] == answerer.answer_batch(questions, passages)
    assert all(r["details"]["answer"] == r["answer_without"] for r in rows)  # the drafts, reused


def test_collect_answers_both_ways_and_resumes(qa_file, corpus_path, tmp_path, capsys):
    out = tmp_path / "outcomes.jsonl"
    argv = [
        "collect",
        "--qa",
        str(qa_file),
        "--corpus",
        str(corpus_path),
        "--out",
        str(out),
        "--k",
        "2",
        "--batch-size",
        "2",
    ]
    from adaptive_gates.models.embedded import SMOLLM2_ID

    assert main([*argv, "--limit", "2"]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed.startswith(f"2 outcome records of {SMOLLM2_ID} in {out} (self-report drafts; ")
    assert printed.endswith(" completion tokens)")
    first = out.read_text()
    qa = [json.loads(line) for line in qa_file.read_text().splitlines()]
    corpus_ids = {r.id for r in load_corpus(corpus_path)}
    records = load_outcomes(out)
    assert [r.id for r in records] == [q["id"] for q in qa[:2]]
    for record, q in zip(records, qa):
        assert record.question == q["question"] and record.answers == q["answers"]
        assert len(record.extra["retrieved"]) == 2 and set(record.extra["retrieved"]) <= corpus_ids
        assert isinstance(record.pred_no_retrieval, str) and isinstance(record.pred_one_retrieval, str)
        assert record.extra["llm"] == SMOLLM2_ID and "certainty_no_retrieval" in record.extra

    # Run again on all three: the two collected records stay as they were, one is added.
    assert main(argv) == 0
    assert capsys.readouterr().out.strip().startswith(f"3 outcome records of {SMOLLM2_ID} in {out} (")
    assert out.read_text().startswith(first)
    assert [r.id for r in load_outcomes(out)] == [q["id"] for q in qa]


def test_seakr_answers_qa_records(qa_file, corpus_path, tmp_path, capsys):
    out = tmp_path / "seakr.json"
    assert (
        main(
            [
                "seakr",
                "--test",
                str(qa_file),
                "--corpus",
                str(corpus_path),
                "--json",
                str(out),
                "--limit",
                "2",
                "--mode",
                "simple",
                "--samples",
                "2",
                "--max-docs",
                "1",
                "--no-rerank",
                "--no-select",
                # the chain of thought's length proves nothing here: a short cap keeps it cheap
                "--answer-tokens",
                "8",
            ]
        )
        == 0
    )
    report = json.loads(out.read_text())
    qa = [json.loads(line) for line in qa_file.read_text().splitlines()]
    corpus_ids = {r.id for r in load_corpus(corpus_path)}
    assert report["n"] == 2 and report["mode"] == "simple" and report["settings"]["threshold"] is None
    rows = report["results"]
    assert [r["id"] for r in rows] == [q["id"] for q in qa[:2]]
    for row in rows:
        assert row["error"] is None
        assert row["em"] == exact_match(row["prediction"], row["answers"])
        assert set(row["trace"]["documents"]) <= corpus_ids and len(row["trace"]["documents"]) <= 1
    assert report["retrieval_calls"] == sum(r["retrieval_calls"] for r in rows)
    assert capsys.readouterr().out.startswith("seakr simple: n=2 ")


def _bad_invocations():
    """(argv with {train}, {test}, {qa}, {corpus}, {out} placeholders, what the message says)."""
    offline = ["eval", "--train", "{train}", "--test", "{test}", "--json", "{out}/r.json"]
    live = ["eval", "--live", "--test", "{qa}", "--corpus", "{corpus}", "--json", "{out}/r.json"]
    fit = ["fit", "--gate", "skr-knn", "--train", "{train}", "--out", "{out}/gate"]
    collect = ["collect", "--qa", "{qa}", "--corpus", "{corpus}", "--out", "{out}/o.jsonl"]
    return [
        ([*offline, "--gate", "nope"], "unknown gate 'nope'; choose from "),
        ([*offline, "--gate", "cascade"], "gate 'cascade' is made of member gates, which no flag gives; choose from "),
        (
            [*offline, "--gate", "skr-knn", "--option", "nope=1"],
            "--option nope: gate 'skr-knn' has no such parameter; its parameters are k, vote, weighting",
        ),
        ([*offline, "--gate", "skr-knn", "--option", "embedder=x"], "--option embedder: gate 'skr-knn' has no"),
        ([*offline, "--gate", "skr-knn", "--option", "k=0"], "gate 'skr-knn': k must be a positive integer"),
        ([*offline, "--gate", "skr-knn", "--option", "k"], "argument --option: options are KEY=VALUE"),
        ([*offline, "--gate", "skr-knn", "--strategy", "punish"], "--strategy: gate 'skr-knn' has no strategy"),
        ([*offline, "--gate", "verbalized", "--strategy", "nope"], "gate 'verbalized': strategy must be one of"),
        ([*offline, "--gate", "skr-knn", "--target-rate", "1.5"], "argument --target-rate: must be a number"),
        ([*offline, "--gate", "skr-knn", "--target-rate", "nan"], "argument --target-rate: must be a number"),
        ([*offline, "--gate", "skr-knn", "--target-rate", "0"], "argument --target-rate: must be a number"),
        ([*offline, "--gate", "skr-knn", "--target-rate", "1"], "argument --target-rate: must be a number"),
        ([*offline, "--gate", "skr-knn", "--target-rate", "lots"], "argument --target-rate: must be a number"),
        ([*offline, "--gate", "skr-knn", "--limit", "3"], "--limit: only with --live"),
        ([*offline, "--gate", "skr-knn", "--corpus", "{test}"], "--corpus: gate 'skr-knn' retrieves nothing to"),
        ([*offline, "--gate", "draft-check"], "gate 'draft-check' needs --corpus (the passages it checks"),
        ([*offline, "--gate", "draft-check", "--retriever", "dense"], "--retriever goes with --corpus"),
        ([*offline, "--gate", "skr-knn", "--frobnicate"], "unrecognized arguments: --frobnicate"),
        (["eval", "--test", "{test}", "--json", "x.json"], "the following arguments are required: --gate"),
        (["eval", "--gate", "skr-knn", "--test", "{test}", "--json", "x.json"], "--train is required"),
        (
            ["eval", "--gate", "skr-knn", "--train", "{out}/missing.jsonl", "--test", "{test}", "--json", "x"],
            "argument --train: no such file: ",
        ),
        (
            [*offline, "--gate", "thrust", "--representer", "embedder", "--layer", "3"],
            "--layer and --pooling go with --representer lm",
        ),
        ([*offline, "--gate", "thrust", "--embedder", "x"], "--embedder goes with --representer embedder"),
        ([*offline, "--gate", "skr-knn", "--chat-model", "gpt-x"], "--chat-model: gate 'skr-knn' does not ask"),
        ([*offline, "--gate", "skr-knn", "--pooling", "mean"], "--pooling: gate 'skr-knn' has no representer"),
        ([*offline, "--gate", "bm25-difficulty", "--embedder", "x"], "--embedder: gate 'bm25-difficulty' uses no"),
        ([*offline, "--gate", "verbalized", "--base-url", "http://127.0.0.1:9"], "--base-url goes with --chat-model"),
        ([*live, "--gate", "verbalized", "--limit", "0"], "argument --limit: must be a positive integer, got '0'"),
        ([*live, "--gate", "verbalized", "--limit", "-1"], "argument --limit: must be a positive integer, got '-1'"),
        ([*live, "--gate", "verbalized", "--k", "0"], "argument --k: must be a positive integer"),
        (["eval", "--live", "--gate", "verbalized", "--test", "{qa}", "--json", "x"], "--live needs --corpus"),
        ([*live, "--gate", "skr-knn"], "gate 'skr-knn' learns from outcome records: give --train"),
        ([*live, "--gate", "verbalized", "--target-rate", "0.3"], "--target-rate with --live calibrates on"),
        (["fit", "--gate", "skr-knn", "--out", "{out}/gate"], "--train is required"),
        ([*fit, "--max-rate", "0.4"], "--max-rate goes with --objective"),
        ([*fit, "--objective", "--target-rate", "0.3"], "give --target-rate or --objective, not both"),
        ([*fit, "--objective", "--max-rate", "0"], "argument --max-rate: must be a number in (0, 1]"),
        ([*fit, "--target-rate", "-0.1"], "argument --target-rate: must be a number"),
        (
            ["fit", "--gate", "skr-knn", "--train", "{train}", "--out", "{out}"],
            "--out {out} already exists; give --overwrite",
        ),
        ([*collect, "--limit", "0"], "argument --limit: must be a positive integer, got '0'"),
        ([*collect, "--limit", "-1"], "argument --limit: must be a positive integer, got '-1'"),
        ([*collect, "--batch-size", "0"], "argument --batch-size: must be a positive integer"),
        ([*collect, "--model", "m", "--chat-model", "c"], "argument --chat-model: not allowed with argument --model"),
        ([*collect, "--concurrency", "3"], "--concurrency goes with --chat-model"),
        ([*collect, "--api-key-env", "HOME"], "--api-key-env goes with --chat-model"),
        ([*collect, "--timeout", "5"], "--timeout goes with --chat-model"),
        ([*collect, "--chat-model", "c", "--timeout", "0"], "argument --timeout: must be a positive number of seconds"),
        ([*collect, "--base-url", "http://127.0.0.1:9"], "--base-url goes with --chat-model"),
        (
            [*collect, "--chat-model", "c", "--timeout", "1e308"],
            "argument --timeout: must be a positive number of seconds, at most 86400, got '1e308'",
        ),
        ([*collect, "--chat-model", "c", "--concurrency", "1000"], "argument --concurrency: must be at most 256"),
        ([*collect, "--max-tokens", "10000000"], "argument --max-tokens: must be at most 32768, got '10000000'"),
        (
            ["seakr", "--test", "{qa}", "--corpus", "{corpus}", "--json", "x", "--samples", str(10**20)],
            f"argument --samples: must be at most 64, got '{10**20}'",
        ),
        (
            ["seakr", "--test", "{qa}", "--corpus", "{corpus}", "--json", "x", "--answer-tokens", "99999"],
            "argument --answer-tokens: must be at most 32768",
        ),
        (
            [*fit[:2], "stacked", *fit[3:], "--option", "embedding_dims=1000000000"],
            "gate 'stacked': embedding_dims must be an integer in [1, 65536], got 1000000000",
        ),
        (
            [*collect, "--chat-model", "c", "--api-key-env", "ADAPTIVE_GATES_UNSET_KEY_VAR"],
            "--api-key-env: the environment variable ADAPTIVE_GATES_UNSET_KEY_VAR is not set",
        ),
        ([*collect, "--top-logprobs", "21"], "argument --top-logprobs: must be at most 20, got '21'"),
        ([*collect, "--top-logprobs", "0"], "argument --top-logprobs: must be a positive integer"),
        ([*collect, "--top-logprobs", "2", "--no-logprobs"], "argument --no-logprobs: not allowed with"),
        (
            ["collect", "--qa", "{qa}", "--corpus", "{corpus}", "--out", "{out}"],
            "argument --out: is a directory, not a file: {out}",
        ),
        ([*offline, "--gate", "skr-knn", "--json", "{out}"], "argument --json: is a directory, not a file: {out}"),
        ([*offline, "--gate", "skr-knn", "--plot", "{out}"], "argument --plot: is a directory, not a file: {out}"),
        (
            ["collect", "--qa", "{out}/missing.jsonl", "--corpus", "{corpus}", "--out", "o.jsonl"],
            "argument --qa: no such file: ",
        ),
        (["seakr", "--test", "{qa}"], "the following arguments are required: --corpus, --json"),
        (["frobnicate"], "argument command: invalid choice: 'frobnicate'"),
        (
            [*fit[:-1], str(pretrained_path("stacked")), "--overwrite"],
            "argument --out: " + f"{pretrained_path('stacked')} is inside the folder of the gates the package ships",
        ),
    ]


@pytest.mark.parametrize("argv, message", _bad_invocations())
def test_bad_invocations_fail_alike_before_any_work(
    split, qa_file, corpus_path, tmp_path, capsys, no_work, argv, message
):
    places = {
        "train": split / "train.jsonl",
        "test": split / "test.jsonl",
        "qa": qa_file,
        "corpus": corpus_path,
        "out": tmp_path,
    }
    assert main([a.format(**places) for a in argv]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(PREFIX), captured.err
    assert message.format(**places) in lines[0]
    assert captured.out == ""


def test_data_errors_are_reported_alike(split, corpus_path, tmp_path, capsys, monkeypatch):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "question": "q"}\n')
    assert (
        main(
            [
                "eval",
                "--gate",
                "skr-knn",
                "--train",
                str(bad),
                "--test",
                str(split / "test.jsonl"),
                "--json",
                str(tmp_path / "r.json"),
            ]
        )
        == 2
    )
    assert capsys.readouterr().err == f"{PREFIX}{bad}:1: field 'answers' is missing\n"

    # Live, the questions are read before the gate is fitted: a bad line costs no fit.
    def no_fit(*args, **kwargs):
        raise AssertionError("the gate was fitted before its test questions were read")

    monkeypatch.setattr(SKRKnnGate, "fit_outcomes", no_fit)
    assert (
        main(
            [
                "eval",
                "--live",
                "--gate",
                "skr-knn",
                "--train",
                str(split / "train.jsonl"),
                "--test",
                str(bad),
                "--corpus",
                str(corpus_path),
                "--json",
                str(tmp_path / "r.json"),
            ]
        )
        == 2
    )
    assert capsys.readouterr().err == f"{PREFIX}{bad}:1: field 'answers' is missing\n"


def test_console_script_is_installed_and_reports_errors_alike(split):
    script = Path(sys.executable).parent / "adaptive-gates"
    assert script.is_file(), f"{script} is not installed"
    # The script imports the package from this checkout, whichever is installed.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    helped = subprocess.run([str(script), "--help"], capture_output=True, text=True, env=env)
    assert helped.returncode == 0 and "eval" in helped.stdout and "collect" in helped.stdout
    failed = subprocess.run(
        [
            str(script),
            "eval",
            "--gate",
            "nope",
            "--train",
            str(split / "train.jsonl"),
            "--test",
            str(split / "test.jsonl"),
            "--json",
            "r.json",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert failed.returncode == 2 and failed.stdout == ""
    assert failed.stderr.startswith(f"{PREFIX}unknown gate 'nope'") and "Traceback" not in failed.stderr


@pytest.mark.parametrize("command", ["eval", "fit"])
def test_the_gate_help_lists_every_registered_gate_a_command_line_can_build(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    help_text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    listed = help_text.split("--gate GATE the gate: ", 1)[1]
    for name in Gate.gate_names():
        buildable = not Gate.gate_class(name).member_params
        assert (f"{name}," in listed or f"{name} " in listed) == buildable, name

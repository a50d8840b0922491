"""The SeaKR pipeline with the real SmolLM2, the real U estimator and a real BM25 index.

The questions are four real ones and the corpus holds their evidence among distractors
on the same topics (``qa_with_evidence``: HotpotQA with the shared Wikipedia paragraphs of
their contexts, else BoolQ with the passages of their articles). Samples are few (k=3)
and short to keep the file fast; the loop tests vary the threshold to make the gate
always or never fire. Whatever the model writes, every trace is checked against the
rules (``check_trace``): SPEC §4.2's gate, the reads, the queries and the reason the
loop stopped.
"""

from __future__ import annotations

import json
import math

import pytest

from adaptive_gates.answering.prompts import fill
from adaptive_gates.cli import main
from adaptive_gates.errors import BackendError, NotFittedError
from adaptive_gates.models import LocalCausalLM
from adaptive_gates.records.answer_metrics import extract_seakr_answer
from adaptive_gates.records.data import CorpusRecord, QARecord, iter_jsonl, write_jsonl
from adaptive_gates.retrieval import BM25Retriever
from adaptive_gates.seakr.pipeline import SeaKRPipeline
from adaptive_gates.seakr.queries import FUNCTION_WORDS, build_query, is_content_word, token_spans
from adaptive_gates.seakr.reasoning import is_usable
from adaptive_gates.seakr.reasoning_prompt import (
    DEFAULT_DEMOS,
    STEP_STOPS,
    build_prompt,
    clip_passage,
    snippet_template,
)
from adaptive_gates.seakr.rerank import DEFAULT_RERANK_TEMPLATE
from adaptive_gates.seakr.runner import run_pipeline
from adaptive_gates.seakr.trace import Step

DEMOS = DEFAULT_DEMOS[:2]  # shorter prompts: the loop logic does not depend on the demo count
FORREST = "Who directed the film in which Tom Hanks played Forrest Gump?"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def questions(qa_with_evidence) -> list[dict]:
    return [{"id": r.id, "question": r.question, "answers": r.answers} for r in qa_with_evidence[0]]


@pytest.fixture(scope="module")
def corpus(qa_with_evidence) -> list[CorpusRecord]:
    return qa_with_evidence[1]


@pytest.fixture(scope="module")
def retriever(corpus) -> BM25Retriever:
    return BM25Retriever.from_records(corpus)


@pytest.fixture(scope="module")
def uncertainty(lm):
    from adaptive_gates.seakr.uncertainty import SelfAwareUncertainty

    return SelfAwareUncertainty(lm, k=3, max_new_tokens=4)


def make(retriever, uncertainty, **options) -> SeaKRPipeline:
    # Short steps and answers: the traces' rules hold whatever their length.
    settings = dict(demos=DEMOS, step_tokens=16, answer_tokens=24)
    return SeaKRPipeline(retriever, uncertainty=uncertainty, **{**settings, **options})


def check_trace(result, pipe: SeaKRPipeline) -> None:
    """Invariants every multi-hop trace must satisfy, whatever the model wrote."""
    steps = result.steps
    assert steps and len(steps) <= pipe.max_steps and all(s.index == i for i, s in enumerate(steps))
    read: list[str] = []
    queries: list[str] = []
    for step in steps:
        assert isinstance(step.pseudo, str) and isinstance(step.text, str)
        # SPEC §4.2: U of the step's context is estimated unless the pseudo-step is empty,
        # and the step retrieves iff U > δ, U is undefined, or the pseudo-step is empty.
        if step.pseudo:
            assert step.n_samples >= 0 and (step.n_samples == 0) == math.isnan(step.uncertainty)
        else:
            assert step.uncertainty is None and step.n_samples == 0
        assert step.retrieve == (not step.pseudo or step.n_samples == 0 or step.uncertainty > pipe.threshold)
        if not step.retrieve:
            assert step.query is None and not step.candidates and step.text == step.pseudo
            continue
        assert step.query
        if step.query_fallback:
            assert step.query == result.question
        # Already-read snippets are never offered again.
        assert not {c.id for c in step.candidates} & set(read)
        if step.candidates:
            assert step.chosen in {c.id for c in step.candidates}
            assert [c.bm25_rank for c in step.candidates] == list(range(len(step.candidates)))
            read.append(step.chosen)
        queries.append(" ".join(step.query.lower().split()))
    assert result.documents == read and len(set(read)) == len(read)
    assert result.stop_reason == _expected_stop(result, pipe, queries)
    if result.stop_reason == "repeated_query":
        assert not steps[-1].candidates and not steps[-1].text
        queries.pop()
    assert len(set(queries)) == len(queries) == result.retrieval_calls
    json.dumps(result.to_dict(), allow_nan=False)


def _expected_stop(result, pipe: SeaKRPipeline, queries: list[str]) -> str:
    """Why the loop must have stopped, from the trace alone (the rules of ``_reason``)."""
    last = result.steps[-1]
    if last.retrieve and queries[-1] in queries[:-1]:
        return "repeated_query"
    if last.retrieve and not last.candidates and not last.text:
        return "no_documents"
    if not last.text:
        return "empty_step"
    if extract_seakr_answer(last.text) is not None:
        return "answered"
    if len(result.documents) >= pipe.max_docs:
        return "max_docs"
    assert len(result.steps) == pipe.max_steps
    return "max_steps"


# ------------------------------------------------------------------- queries
def test_content_word_filter() -> None:
    for word in ("the", "was", "of", "He", "which", "and", "by", "is", "a"):
        assert not is_content_word(word), word
    for word in ("Paris", "directed", "1879", "quickly", "first", "two", "O'Brien", "Jean-Paul", "film"):
        assert is_content_word(word), word
    # The numerals, nouns and verbs in scikit-learn's stop-word list count as content.
    assert {"first", "two", "name", "found"}.isdisjoint(FUNCTION_WORDS)


def test_query_keeps_confident_and_known_content_words(lm) -> None:
    gen = lm.generate(build_prompt(FORREST, demos=DEMOS), max_new_tokens=32, stop=list(STEP_STOPS), formatted=True)[0]
    assert gen.text.strip()
    query = build_query(gen.text, gen.token_ids, gen.token_logprobs, lm.tokenizer, FORREST)
    spans = token_spans(lm.tokenizer, gen.token_ids)
    question_words = {w.lower().strip("?") for w in FORREST.split()}
    expected = []
    for word, start in _words(gen.text):
        end = start + len(word)
        lps = [lp for (s, e), lp in zip(spans, gen.token_logprobs) if s < end and e > start]
        confident = min(lps) >= math.log(0.9)
        if is_content_word(word) and (confident or word.lower() in question_words):
            expected.append(word)
    assert list(query.words) == expected and not query.fallback
    assert all(w.lower() not in FUNCTION_WORDS for w in query.words)
    # Words of the previous step count as known: then every content word is kept.
    everything = build_query(gen.text, gen.token_ids, gen.token_logprobs, lm.tokenizer, FORREST, previous_step=gen.text)
    assert list(everything.words) == [w for w, _ in _words(gen.text) if is_content_word(w)]


def test_query_falls_back_to_the_question(lm) -> None:
    query = build_query("", [], [], lm.tokenizer, "  Who wrote   Hamlet? ")
    assert query.fallback and query.text == "Who wrote Hamlet?" and query.words == ()
    with pytest.raises(ValueError, match="theta"):
        build_query("x", [1], [0.0], lm.tokenizer, "q", theta=1.0)


def _words(text: str) -> list[tuple[str, int]]:
    """(word, offset) pairs as the query generator splits them."""
    import re

    return [(m.group(), m.start()) for m in re.finditer(r"\w+(?:[-'’.]\w+)*", text)]


# ------------------------------------------------------------------- prompts
def test_prompt_is_the_code_form_and_matches_the_reranker_template() -> None:
    prompt = build_prompt("Q?", ["Step one.", "Step two."], ["A  doc\nsplit"], demos=DEMOS)
    demos, _, rest = prompt.partition("\n\nContext: ")
    assert demos.split("\n\n") == [d.render() for d in DEMOS]
    assert DEMOS[0].render().endswith(f"So the answer is {DEMOS[0].answer}.")
    assert rest == '[1] A doc split\nAnswer in the same format as before. \nQuestion: "Q?"\nAnswer: Step one. Step two.'
    assert build_prompt("Q?", demos=()).endswith('Question: "Q?"\nAnswer:')  # quoted: prompts.quote_question
    snippet = clip_passage("T: a  long text", 8)
    assert fill(snippet_template(DEMOS), snippet=snippet, question="Q?", reasoning=" s.") == build_prompt(
        "Q?", ["s."], ["T: a  long text"], demos=DEMOS, max_doc_chars=8
    )


def test_the_reranker_default_is_the_snippet_prompt_with_the_short_answer_instruction() -> None:
    prompt = fill(DEFAULT_RERANK_TEMPLATE, snippet="A doc.", question="Q?", reasoning="")
    assert (
        prompt == 'Context: [1] A doc.\nAnswer the following question with one or few words.\nQuestion: "Q?"\nAnswer:'
    )


def test_the_pipeline_gate_is_its_first_step(retriever, uncertainty) -> None:
    """``calibrate`` scores questions with ``pipe.gate``: the context, stops and budget of
    the first step's gate."""
    pipe = make(retriever, uncertainty)
    gate = pipe.gate
    assert fill(gate.prompt_template, question="Q?") == pipe._prompt("Q?") == build_prompt("Q?", demos=DEMOS)
    assert (list(gate.stop), gate.step_tokens, gate.formatted) == (list(STEP_STOPS), pipe.step_tokens, True)
    assert gate.uncertainty is uncertainty


def test_bad_parameters_are_refused(retriever) -> None:
    for options in (
        {"mode": "iterative"},
        {"rationale": "both"},
        {"max_steps": 0},
        {"threshold": math.nan},
        {"theta": 1.5},
        {"n_candidates": True},
    ):
        with pytest.raises(ValueError):
            SeaKRPipeline(retriever, **options)
    for name in ("step_tokens", "answer_tokens"):
        with pytest.raises(ValueError, match=f"{name} must be at most 32768, got 1000000"):
            SeaKRPipeline(retriever, **{name: 10**6})


# ------------------------------------------------------------ multi-hop loop
def test_full_trace_with_reranking_and_selection(retriever, uncertainty, questions) -> None:
    # Two candidates are the fewest that re-ranking can order.
    pipe = make(retriever, uncertainty, threshold=-math.inf, max_steps=1, n_candidates=2)
    result = pipe.answer(questions[0]["question"])
    check_trace(result, pipe)
    assert len(result.steps) == 1 and result.retrieval_calls == 1
    first = result.steps[0]
    assert first.retrieve and len(first.candidates) >= 2
    # Re-ranking: every candidate scored, and the chosen one has the lowest U.
    us = [c.uncertainty for c in first.candidates]
    assert all(isinstance(u, float) for u in us)
    finite = [u for u in us if not math.isnan(u)]
    assert first.chosen_uncertainty == min(finite)
    # Reasoning selection: the routes are recorded, the answer is the chosen one's.
    names = [r.name for r in result.routes]
    assert names[0] == "rationale" and names[1:] == ["knowledge"]
    if any(is_usable(r.answer) for r in result.routes):  # the selector chose a route
        chosen = next(r for r in result.routes if r.name == result.chosen_route)
        assert result.answer == chosen.answer and result.selection_reason
    else:  # no route answered: nothing to choose, the answer is the one without selection
        assert result.chosen_route is None and result.answer == pipe.unselected_answer(
            result.question, [s.text for s in result.steps if s.text], result.loop_answer
        )
    assert result.seconds > 0


def test_paper_rationale_route_scores_the_mean_step_uncertainty(retriever, uncertainty, questions) -> None:
    pipe = make(retriever, uncertainty, threshold=math.inf, max_steps=2, rationale="append")
    # δ = inf never fires the gate, but an empty pseudo-step still retrieves (SPEC §4.2):
    # the first question (from the second on) whose loop read nothing has only the rationale route.
    runs = (pipe.answer(q["question"]) for q in questions[1:] + questions[:1])
    result = next(r for r in runs if not r.documents)
    check_trace(result, pipe)
    kept = [s for s in result.steps if s.text]
    assert kept
    (route,) = result.routes
    assert route.name == "rationale" and route.uncertainty == pytest.approx(
        sum(s.uncertainty for s in kept) / len(kept)
    )
    assert result.answer == (
        route.answer or pipe.unselected_answer(result.question, [s.text for s in kept], result.loop_answer)
    )


def _first_with(pipe: SeaKRPipeline, rows: list[dict], reason: str) -> list:
    """Run questions until one ends with ``reason``; every trace is checked on the way."""
    results = []
    for row in rows:
        result = pipe.answer(row["question"])
        check_trace(result, pipe)
        results.append(result)
        if result.stop_reason == reason:
            break
    return results


def test_loop_stops_at_max_steps(retriever, uncertainty, questions) -> None:
    pipe = make(retriever, uncertainty, threshold=math.inf, max_steps=1, select=False)
    results = _first_with(pipe, questions, "max_steps")
    for result in results:
        # δ = +inf: only an empty pseudo-step or an undefined U retrieves (check_trace).
        assert len(result.steps) == 1 and result.retrieval_calls == int(result.steps[0].retrieve)
    last = results[-1]
    assert last.stop_reason == "max_steps" and last.loop_answer is None
    assert last.answer == pipe.unselected_answer(last.question, [last.steps[0].text], None)  # forced


def test_loop_stops_at_max_docs(retriever, uncertainty, questions) -> None:
    pipe = make(retriever, uncertainty, threshold=-math.inf, max_docs=1, rerank=False, select=False)
    results = _first_with(pipe, questions, "max_docs")
    for result in results:
        first = result.steps[0]
        assert first.retrieve and first.query  # δ = −inf: the gate always fires
        # Without re-ranking the snippet read is BM25's first; one snippet ends the loop.
        assert result.documents == [s.candidates[0].id for s in result.steps if s.candidates][:1]
        assert len(result.documents) <= 1
    assert results[-1].stop_reason == "max_docs" and len(results[-1].steps) == 1


def test_a_query_searched_before_ends_the_loop(retriever, uncertainty, questions) -> None:
    # Whether a whole run repeats a query depends on what the model writes; the rule does
    # not: the same question and steps give the same greedy pseudo-step, hence the same
    # query, and a query searched before ends the loop without searching again.
    # Eight-token steps: a query is built from whatever the step holds.
    pipe = make(retriever, uncertainty, threshold=-math.inf, rerank=False, select=False, step_tokens=8)
    question = questions[0]["question"]
    searched: set[str] = set()
    first = Step(index=0)
    assert pipe._step(question, [], [], searched, first) in (None, "no_documents")
    assert first.retrieve and first.query and searched == {" ".join(first.query.lower().split())}
    again = Step(index=1)
    assert pipe._step(question, [], [], searched, again) == "repeated_query"
    assert again.query == first.query and again.text == "" and len(searched) == 1


# ---------------------------------------------------------------- δ and its calibration
def test_multihop_refuses_to_run_without_delta(retriever, questions, tmp_path) -> None:
    # A model that cannot load: any work before the refusal would fail with another error.
    absent = LocalCausalLM(str(tmp_path / "no-model"))
    pipe = SeaKRPipeline(retriever, absent)
    assert pipe.threshold is None and pipe.calibration_ is None
    with pytest.raises(NotFittedError, match="threshold= or call calibrate"):
        pipe.answer(questions[0]["question"])
    records = [QARecord("q", questions[0]["question"], questions[0]["answers"])]
    checkpoint = tmp_path / "rows.jsonl"
    with pytest.raises(NotFittedError, match="no δ"):
        run_pipeline(records, retriever, lm=absent, checkpoint=checkpoint, progress=False)
    for bad in (
        {"threshold": 1.0, "target_rate": 0.5, "calibration_questions": ["q?"]},
        {"target_rate": 0.5},
        {"calibration_questions": ["q?"]},
        {"target_rate": 1.5, "calibration_questions": ["q?"]},
        {"target_rate": 0.5, "calibration_questions": []},
    ):
        with pytest.raises(ValueError):
            run_pipeline(records, retriever, lm=absent, checkpoint=checkpoint, progress=False, **bad)
    assert not checkpoint.exists()


def test_calibration_by_target_rate_on_real_questions(retriever, uncertainty, questions) -> None:
    questions = [row["question"] for row in questions[:2]]  # two split at 0.5 as many would
    # The greedy step need only be non-empty: U is of the context, whatever the step's length.
    pipe = make(retriever, uncertainty, max_steps=1, step_tokens=8, rerank=False, select=False)
    pipe.calibrate(questions, 0.5)
    cal = pipe.calibration_
    assert (cal.method, cal.n, cal.target_rate) == ("rate", len(questions), 0.5) and pipe.threshold == cal.threshold
    # δ splits the U of the questions' first-step contexts (computed here directly) at the target.
    us = [uncertainty.estimate(build_prompt(q, demos=DEMOS), stop=STEP_STOPS, formatted=True).value for q in questions]
    share = sum(u > pipe.threshold for u in us) / len(us)
    assert share == cal.realised_rate and abs(share - 0.5) <= 1 / len(us)
    # The pipeline's first step decides on that same U against δ.
    lowest = min(range(len(us)), key=us.__getitem__)
    first = pipe.answer(questions[lowest]).steps[0]
    assert first.uncertainty == pytest.approx(us[lowest], abs=1e-4)
    assert first.retrieve == (not first.pseudo or us[lowest] > pipe.threshold)


# ------------------------------------------------------- one-shot modes, runs
def test_simple_mode_reranks_one_retrieval(retriever, uncertainty, questions) -> None:
    pipe = make(retriever, uncertainty, mode="simple", n_candidates=2)  # the fewest re-ranking can order
    question = questions[1]["question"]
    result = pipe.answer(question)
    (step,) = result.steps
    assert result.retrieval_calls == 1 and step.query == question and result.stop_reason == "single"
    assert [c.id for c in step.candidates] == [h.id for h in retriever.search(question, 2)]
    assert result.documents == [step.chosen]
    finite = [c.uncertainty for c in step.candidates if not math.isnan(c.uncertainty)]
    assert step.chosen_uncertainty == min(finite)
    chosen = next(h for h in retriever.search(question, 2) if h.id == step.chosen)
    # the step's own answer, else the one forced with "So the answer is" after the snippet
    assert result.loop_answer == extract_seakr_answer(step.text)
    assert result.answer and result.answer == pipe.unselected_answer(
        question, [step.text], result.loop_answer, [chosen.as_passage()]
    )
    json.dumps(result.to_dict(), allow_nan=False)


class _BrokenRetriever:
    def search(self, query: str, k: int = 3):
        raise BackendError("index unavailable")


def test_failures_are_recorded_and_runs_resume(retriever, uncertainty, questions, tmp_path) -> None:
    short = dict(answer_tokens=8, step_tokens=8)  # what is checked is the trace and the rows, not the answer's text
    broken = make(_BrokenRetriever(), uncertainty, mode="single-retrieval", **short).answer(questions[0]["question"])
    assert "index unavailable" in broken.steps[0].error and broken.documents == []

    records = [QARecord("good", questions[2]["question"], questions[2]["answers"]), QARecord("bad", "   ", ["x"])]
    checkpoint = tmp_path / "rows.jsonl"
    report = run_pipeline(
        records,
        retriever,
        uncertainty=uncertainty,
        checkpoint=checkpoint,
        progress=False,
        mode="single-retrieval",
        demos=DEMOS,
        **short,
    )
    good, bad = report["results"]
    assert report["n"] == 2 and report["errors"] == 1 and report["retrieval_calls"] == 1
    assert bad["error"].startswith("InvalidQuestionError") and bad["prediction"] == "" and bad["em"] == 0
    assert good["error"] is None and good["trace"]["documents"] == [h.id for h in retriever.search(good["question"], 3)]
    json.dumps(report, allow_nan=False)
    again = run_pipeline(
        records,
        _BrokenRetriever(),
        uncertainty=uncertainty,
        checkpoint=checkpoint,
        progress=False,
        mode="single-retrieval",
        demos=DEMOS,
    )
    assert again["results"] == report["results"]  # reused, not recomputed with the broken index
    assert len(list(iter_jsonl(checkpoint))) == 2
    # An interrupted write leaves half a row: it is set aside and the whole rows are reused.
    with checkpoint.open("a", encoding="utf-8") as fh:
        fh.write('{"id": "next", "quest')
    resumed = run_pipeline(
        records,
        _BrokenRetriever(),
        uncertainty=uncertainty,
        checkpoint=checkpoint,
        progress=False,
        mode="single-retrieval",
        demos=DEMOS,
    )
    assert resumed["results"] == report["results"]
    assert (tmp_path / "rows.jsonl.torn").read_text(encoding="utf-8") == '{"id": "next", "quest\n'


@pytest.fixture
def cli_files(corpus, questions, tmp_path):
    """The QA records and the corpus as the files the command reads."""
    test = tmp_path / "qa.jsonl"
    write_jsonl(test, [{"id": r["id"], "question": r["question"], "answers": r["answers"]} for r in questions])
    corpus_path = tmp_path / "corpus.jsonl"
    write_jsonl(corpus_path, [{"id": r.id, "title": r.title, "text": r.text} for r in corpus])
    return test, corpus_path


def test_cli_seakr_writes_scores_and_traces(cli_files, tmp_path, capsys) -> None:
    test, corpus_path = cli_files
    out = tmp_path / "out" / "seakr.json"
    code = main(
        [
            "seakr",
            "--test",
            str(test),
            "--corpus",
            str(corpus_path),
            "--limit",
            "1",
            "--mode",
            "no-retrieval",
            "--json",
            str(out),
            "--answer-tokens",
            "16",  # a chain of thought's length proves nothing here
            "--step-tokens",
            "8",
            "--demos",
            "2",  # a prompt of two demonstrations shows the run as well as one of all ten
        ]
    )
    assert code == 0
    report = json.loads(out.read_text())
    assert report["n"] == 1 and report["mode"] == "no-retrieval" and report["retrieval_calls"] == 0
    assert (report["settings"]["answer_tokens"], report["settings"]["step_tokens"]) == (16, 8)
    assert report["settings"]["demos"] == 2
    assert {"em", "f1", "results", "settings"} <= report.keys()
    assert report["settings"]["threshold"] is None and report["calibration"] is None  # δ is not used
    assert report["results"][0]["trace"]["steps"][0]["text"]
    assert "seakr no-retrieval: n=1" in capsys.readouterr().out


CLI_SMALL = [
    *("--limit", "1", "--samples", "4", "--sample-tokens", "8", "--step-tokens", "8"),
    *("--max-steps", "1", "--no-rerank", "--no-select", "--demos", "2"),
]


def test_cli_seakr_multihop_with_a_threshold(cli_files, tmp_path, capsys) -> None:
    test, corpus_path = cli_files
    out = tmp_path / "seakr.json"
    assert (
        main(
            [
                "seakr",
                "--test",
                str(test),
                "--corpus",
                str(corpus_path),
                "--json",
                str(out),
                "--threshold",
                "-1000",
                *CLI_SMALL,
            ]
        )
        == 0
    )
    report = json.loads(out.read_text())
    assert report["mode"] == "multihop" and report["settings"]["threshold"] == -1000
    assert report["calibration"] is None and report["uncertainty"]["k"] == 4
    assert report["uncertainty"]["max_new_tokens"] == 8 and report["settings"]["step_tokens"] == 8
    (row,) = report["results"]
    assert row["error"] is None
    first = row["trace"]["steps"][0]
    assert first["retrieve"] and row["retrieval_calls"] == 1  # every U is above −1000
    assert "δ=-1000" in capsys.readouterr().out


def test_cli_seakr_multihop_calibrated_on_train_questions(cli_files, questions, tmp_path, capsys) -> None:
    test, corpus_path = cli_files
    train = tmp_path / "train.jsonl"  # two other real questions
    write_jsonl(train, [{"id": r["id"], "question": r["question"], "answers": r["answers"]} for r in questions[1:3]])
    out = tmp_path / "seakr.json"
    assert (
        main(
            [
                "seakr",
                "--test",
                str(test),
                "--corpus",
                str(corpus_path),
                "--json",
                str(out),
                "--target-rate",
                "0.5",
                "--train",
                str(train),
                *CLI_SMALL,
            ]
        )
        == 0
    )
    report = json.loads(out.read_text())
    cal = report["calibration"]
    assert (cal["method"], cal["n"], cal["target_rate"], cal["realised_rate"]) == ("rate", 2, 0.5, 0.5)
    assert report["settings"]["threshold"] == cal["threshold"]
    first = report["results"][0]["trace"]["steps"][0]
    forced = not first["pseudo"] or first["uncertainty"] is None
    assert first["retrieve"] == (forced or first["uncertainty"] > cal["threshold"])
    assert "calibrated on 2 questions" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ([], "needs δ: give --threshold"),
        (["--threshold", "3", "--target-rate", "0.5", "--train", "t.jsonl"], "not both"),
        (["--target-rate", "0.5"], "give --train"),
        (["--threshold", "3", "--train", "t.jsonl"], "--train goes with --target-rate"),
        (["--target-rate", "1.5", "--train", "t.jsonl"], "--target-rate: must be a number strictly between 0 and 1"),
        (["--mode", "simple", "--threshold", "3"], "--mode multihop only"),
        (["--threshold", "3", "--limit", "0"], "--limit: must be a positive integer"),
        (["--threshold", "3", "--demos", "11"], "--demos: must be at most 10 (the demonstrations there are)"),
    ],
)
def test_cli_seakr_refuses_a_missing_or_doubled_delta_before_any_work(tmp_path, capsys, flags, message) -> None:
    # The input files exist but hold nothing readable: the flags are checked before anything is read.
    for name in ("qa.jsonl", "corpus.jsonl", "t.jsonl"):
        (tmp_path / name).write_text("not json\n", encoding="utf-8")
    flags = [str(tmp_path / f) if f.endswith(".jsonl") else f for f in flags]
    code = main(
        [
            "seakr",
            "--test",
            str(tmp_path / "qa.jsonl"),
            "--corpus",
            str(tmp_path / "corpus.jsonl"),
            "--json",
            str(tmp_path / "out.json"),
            *flags,
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("adaptive-gates: error: ") and message in err
    assert "Traceback" not in err and not (tmp_path / "out.json").exists()

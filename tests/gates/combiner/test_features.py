"""The feature combiner on real rows: question and draft features of the bundled HotpotQA
outcomes (Llama-3.1-8B) with real BM25 hits over the questions' own paragraphs, and the
real MiniLM for a few questions. Numpy's trees equal scikit-learn's, a saved combiner
scores identically once loaded (no pickle, no scikit-learn), a load refuses other
features and malformed arrays, and a fitted combiner ranks held-out questions better
than chance."""

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from adaptive_gates.bundled.datasets import adarague_outcomes
from adaptive_gates.errors import GateLoadError
from adaptive_gates.evaluation import gap_capture, gate_curve, oracle_curve, random_auc
from adaptive_gates.gates.combiner.features import FeatureCombiner, fit_feature_combiner, refit_feature_combiner
from adaptive_gates.gates.combiner.logistic import head_outcomes
from adaptive_gates.gates.combiner.trees import TreeEnsemble
from adaptive_gates.persistence.saved_format import save_array
from adaptive_gates.records.data import CorpusRecord
from adaptive_gates.records.selfknowledge import outcome_scores
from adaptive_gates.retrieval import BM25Retriever
from adaptive_gates.signals.draft import DRAFT_FEATURE_NAMES, draft_features
from adaptive_gates.signals.question_features import FEATURE_NAMES, question_features

pytestmark = pytest.mark.usefixtures("one_torch_thread")

NAMES = (*FEATURE_NAMES, *DRAFT_FEATURE_NAMES)
#: Questions embedded with MiniLM (few: embedding is the slow part).
EMBEDDED = 120


@pytest.fixture(scope="module")
def rows():
    """The 500 bundled HotpotQA questions' feature rows and outcomes."""
    records = adarague_outcomes("hotpotqa")
    paragraphs = dict.fromkeys((c["title"], c["text"]) for r in records for c in r.context)
    retriever = BM25Retriever.from_records([CorpusRecord(f"h{i}", t, x) for i, (t, x) in enumerate(paragraphs)])
    questions = [r.question for r in records]
    hits = retriever.search_batch(questions, 3)
    draft = draft_features(
        questions,
        [r.pred_no_retrieval for r in records],
        [[h.as_passage() for h in row] for row in hits],
        [[h.score for h in row] for row in hits],
    )
    a, b = outcome_scores(records)
    return questions, np.hstack([question_features(questions), draft]), a, b


@pytest.fixture(scope="module")
def embeddings(rows, cached_embedder):
    return np.asarray(cached_embedder.embed(rows[0][:EMBEDDED]), dtype=np.float64)


@pytest.fixture(scope="module")
def blend(rows, embeddings):
    """A rank-averaged combiner with an embedding block, fitted on the first 90 rows."""
    _, x, a, b = rows
    return fit_feature_combiner(x[:90], NAMES, a[:90], b[:90], embeddings=embeddings[:90], embedding_dims=8)


def _capture(scores: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    value = gap_capture(gate_curve(scores, a, b).auc, random_auc(a, b), oracle_curve(a, b).auc)
    assert value is not None
    return value


def test_numpy_trees_equal_scikit_learn_on_held_out_rows(rows) -> None:
    from sklearn.ensemble import HistGradientBoostingClassifier

    _, x, a, _ = rows
    train, held = x[:300].copy(), x[300:].copy()
    train[::9, 3] = np.nan  # missing values take the side the training chose
    held[::4, 3] = np.nan
    held[::5, 0] = np.nan  # and a side for a feature never missing in training
    model = HistGradientBoostingClassifier(max_depth=3, max_iter=60, early_stopping=False, random_state=0)
    model.fit(train, a[:300])
    trees = TreeEnsemble.from_sklearn(model, x.shape[1])
    assert trees.n_trees == 60
    np.testing.assert_allclose(trees.raw(held), model.decision_function(held), rtol=0, atol=1e-9)
    np.testing.assert_allclose(trees.probability(held), model.predict_proba(held)[:, 1], rtol=0, atol=1e-9)
    with pytest.raises(ValueError, match="features"):
        trees.raw(held[:, :5])


def test_agreement_alone_ranks_held_out_questions_better_than_chance(rows) -> None:
    _, x, a, b = rows
    agreement = [NAMES.index(n) for n in ("agree_any", "agree_top", "agree_share", "overlap_best")]
    combiner = fit_feature_combiner(
        x[:300, agreement], [NAMES[i] for i in agreement], a[:300], b[:300], model="logistic"
    )
    scores = combiner.score(x[300:, agreement])
    # the draft stated by a passage is the one retrieval does not need to fix
    assert _capture(scores, a[300:], b[300:]) > 0.1


@pytest.mark.parametrize("model", ["blend", "logistic", "boosted"])
@pytest.mark.parametrize("target", ["gain", "helps"])
def test_every_model_and_target_beats_chance_on_held_out_questions(rows, model, target) -> None:
    _, x, a, b = rows
    combiner = fit_feature_combiner(x[:350], NAMES, a[:350], b[:350], model=model, target=target)
    scores = combiner.score(x[350:])
    assert scores.shape == (150,) and np.all(np.isfinite(scores))
    assert _capture(scores, a[350:], b[350:]) > 0
    if model == "blend":
        assert np.all((scores >= 0) & (scores <= 1))


def test_a_saved_combiner_scores_the_same_once_loaded_without_scikit_learn(rows, embeddings, blend, tmp_path):
    _, x, _, _ = rows
    path = blend.save(tmp_path / "combiner")
    assert not list(path.glob("*.pkl")) and all(p.suffix in (".json", ".npy") for p in path.iterdir())
    loaded = FeatureCombiner.load(path, NAMES)
    held, vectors = x[90:EMBEDDED], embeddings[90:]
    assert np.array_equal(loaded.score(held, vectors), blend.score(held, vectors))
    assert loaded.model == "blend" and loaded.projection is not None and len(loaded.projection.components) == 8

    np.save(tmp_path / "rows.npy", held, allow_pickle=False)
    np.save(tmp_path / "vectors.npy", vectors, allow_pickle=False)
    script = f"""
import sys, numpy as np
from adaptive_gates.gates.combiner.features import FeatureCombiner
from adaptive_gates.signals.draft import DRAFT_FEATURE_NAMES
from adaptive_gates.signals.question_features import FEATURE_NAMES
combiner = FeatureCombiner.load({str(path)!r}, (*FEATURE_NAMES, *DRAFT_FEATURE_NAMES))
scores = combiner.score(np.load({str(tmp_path / "rows.npy")!r}), np.load({str(tmp_path / "vectors.npy")!r}))
np.save({str(tmp_path / "scores.npy")!r}, scores)
print("sklearn" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
    assert np.array_equal(np.load(tmp_path / "scores.npy"), blend.score(held, vectors))


def test_a_load_refuses_other_features(blend, tmp_path) -> None:
    path = blend.save(tmp_path / "combiner")
    for names in (NAMES[::-1], NAMES[:-1], (*NAMES, "extra")):
        with pytest.raises(GateLoadError, match=re.escape("field 'state.feature_names'")):
            FeatureCombiner.load(path, names)


def test_a_load_refuses_an_edited_directory(blend, tmp_path) -> None:
    path = blend.save(tmp_path / "combiner")
    save_array(path, "reference_boosted.npy", np.zeros(3))
    with pytest.raises(GateLoadError, match=re.escape("reference_boosted.npy")):
        FeatureCombiner.load(path, NAMES)


def _written(blend, tmp_path):
    directory = tmp_path / "parts"
    directory.mkdir()
    state = json.loads(json.dumps(blend.write_files(directory)))
    return directory, state


@pytest.mark.parametrize(
    ("file", "array", "message"),
    [
        ("reference_logistic.npy", np.array([3.0, 1.0, 2.0]), "sorted finite scores"),
        ("reference_logistic.npy", np.zeros((2, 2)), "sorted finite scores"),
        ("projection_components.npy", np.zeros((8, 5)), r"must hold \(8, 384\)"),
        ("projection_mean.npy", np.array(["a"] * 384), "projection_mean.npy"),
        ("boosted_with_offsets.npy", np.array([0.0, 5.0]), "integer offsets"),
        ("combiner_mean.npy", np.zeros(3), "combiner_mean.npy"),
    ],
)
def test_a_load_refuses_malformed_arrays(blend, embeddings, tmp_path, file, array, message) -> None:
    directory, state = _written(blend, tmp_path)
    save_array(directory, file, array)
    with pytest.raises(GateLoadError, match=message):
        FeatureCombiner.from_files(directory, state, NAMES)


def test_a_load_refuses_trees_that_could_loop_or_read_other_columns(blend, tmp_path) -> None:
    directory, state = _written(blend, tmp_path)
    nodes = np.load(directory / "boosted_with_nodes.npy")
    inner = int(np.flatnonzero(nodes[:, 4] == 0)[0])
    for column, value, message in ((2, 0.0, "later node"), (0, 10_000.0, "feature outside"), (6, np.inf, "finite")):
        edited = nodes.copy()
        edited[inner, column] = value
        save_array(directory, "boosted_with_nodes.npy", edited)
        with pytest.raises(GateLoadError, match=message):
            FeatureCombiner.from_files(directory, state, NAMES)
    save_array(directory, "boosted_with_nodes.npy", nodes[:-1])
    with pytest.raises(GateLoadError, match=re.escape("boosted_with_nodes.npy")):
        FeatureCombiner.from_files(directory, state, NAMES)


def test_a_load_refuses_a_malformed_state(blend, tmp_path) -> None:
    directory, state = _written(blend, tmp_path)
    assert FeatureCombiner.from_files(directory, state, NAMES).model == "blend"
    for field, value in (("target", "most"), ("model", "forest"), ("boosted", {}), ("references", ["logistic"])):
        with pytest.raises(GateLoadError, match=re.escape(f"field 'state.{field}'")):
            FeatureCombiner.from_files(directory, {**state, field: value}, NAMES)
    with pytest.raises(GateLoadError, match=re.escape("field 'state.boosted.with.baseline'")):
        broken = {**state["boosted"], "with": {**state["boosted"]["with"], "baseline": "0"}}
        FeatureCombiner.from_files(directory, {**state, "boosted": broken}, NAMES)


def test_fit_and_score_check_their_inputs(rows, blend, embeddings) -> None:
    _, x, a, b = rows
    with pytest.raises(ValueError, match="distinctly named"):
        fit_feature_combiner(x[:50], NAMES[:-1], a[:50], b[:50])
    with pytest.raises(ValueError, match="outcomes"):
        fit_feature_combiner(x[:50], NAMES, a[:40], b[:40])
    with pytest.raises(ValueError, match="embeddings of width 384"):
        blend.score(x[:5])
    with pytest.raises(ValueError, match="features"):
        blend.score(x[:5, :-1], embeddings[:5])


@pytest.mark.parametrize("model", ["blend", "logistic", "boosted"])
@pytest.mark.parametrize("target", ["gain", "helps"])
def test_rows_without_an_outcome_teach_only_the_heads_that_have_one(rows, model, target) -> None:
    _, x, a, b = rows
    unseen = a[:200].copy()
    unseen[150:] = np.nan  # the last 50 rows show their answer with retrieval only
    partial = fit_feature_combiner(x[:200], NAMES, unseen, b[:200], model=model, target=target)
    kept = fit_feature_combiner(x[:150], NAMES, a[:150], b[:150], model=model, target=target)
    assert np.all(np.isfinite(partial.score(x[300:])))
    if target == "helps":  # 'helps' needs both answers: those rows teach nothing
        assert np.isnan(head_outcomes(unseen, b[:200], "helps")["helps"][150:]).all()
    elif model != "logistic":  # the trees of correctness without retrieval learn from the first 150 rows alone
        trees = [c.boosted["without"].probability(np.asarray(x[300:])) for c in (kept, partial)]
        np.testing.assert_allclose(*trees, rtol=0, atol=1e-12)


def test_a_refit_keeps_what_the_first_rows_taught_it(rows, blend, embeddings) -> None:
    _, x, a, b = rows
    same = refit_feature_combiner(
        blend, x[:90], head_outcomes(a[:90], b[:90], "gain"), embeddings=embeddings[:90], rows=90
    )
    held, vectors = x[90:EMBEDDED], embeddings[90:]
    np.testing.assert_allclose(same.score(held, vectors), blend.score(held, vectors), rtol=0, atol=1e-12)

    more = {"with": np.r_[b[:90], np.ones(30)], "without": np.r_[a[:90], np.full(30, np.nan)]}
    refitted = refit_feature_combiner(blend, x[:EMBEDDED], more, embeddings=embeddings, rows=90)
    assert refitted.projection is blend.projection
    for model, reference in refitted.references.items():
        assert len(reference) == 90, model  # blended ranks are places among the first rows' scores
    np.testing.assert_array_equal(refitted.boosted["without"].nodes, blend.boosted["without"].nodes)
    assert not np.array_equal(refitted.boosted["with"].nodes, blend.boosted["with"].nodes)
    with pytest.raises(ValueError, match="heads"):
        refit_feature_combiner(blend, x[:90], {"helps": a[:90]}, embeddings=embeddings[:90], rows=90)


def test_an_integer_row_weight_counts_as_that_many_copies_of_the_row(rows) -> None:
    from adaptive_gates.gates.combiner.logistic import fit_combiner, standardisation

    _, x, a, b = rows
    weights = np.where(np.arange(200) % 3 == 0, 3.0, 1.0)
    copies = np.repeat(np.arange(200), weights.astype(int))
    outcomes = head_outcomes(a[:200], b[:200], "gain")
    scaling = standardisation(x[:200])
    weighted = fit_combiner(x[:200], outcomes, "gain", 0.05, scaling, weights)
    repeated = fit_combiner(x[copies], {k: v[copies] for k, v in outcomes.items()}, "gain", 0.05, scaling)
    for head in ("with", "without"):
        np.testing.assert_allclose(weighted.heads[head][0], repeated.heads[head][0], rtol=0, atol=1e-4)
    assert weighted.base_rate == pytest.approx(repeated.base_rate, abs=1e-12)
    unweighted = fit_combiner(x[:200], outcomes, "gain", 0.05, scaling)
    assert not np.allclose(weighted.heads["with"][0], unweighted.heads["with"][0], atol=1e-3)


def test_rows_of_weight_zero_teach_nothing_and_heavy_rows_pull_the_score(rows, blend, embeddings) -> None:
    _, x, a, b = rows
    helps = head_outcomes(a, b, "helps")["helps"]
    gain = refit_feature_combiner(
        blend, x[:90], head_outcomes(a[:90], b[:90], "gain"), embeddings=embeddings[:90], rows=90
    )
    base = refit_feature_combiner(
        blend, x[:90], {"helps": helps[:90]}, embeddings=embeddings[:90], rows=90, target="helps"
    )
    assert gain.target == "gain" and base.target == "helps" and set(base.boosted) == {"helps"}
    # 30 more rows, each taught that retrieval helps, weighted 0: the combiner is the base one
    more = {"helps": np.r_[helps[:90], np.ones(30)]}
    ignored = refit_feature_combiner(
        blend,
        x[:EMBEDDED],
        more,
        embeddings=embeddings,
        rows=90,
        target="helps",
        sample_weight=np.r_[np.ones(90), np.zeros(30)],
    )
    held, vectors = x[90:EMBEDDED], embeddings[90:]
    np.testing.assert_allclose(ignored.score(held, vectors), base.score(held, vectors), rtol=0, atol=1e-12)
    # weighted 1 they move the model towards "helps" on those rows; weighted 5, further
    light, heavy = (
        refit_feature_combiner(
            blend,
            x[:EMBEDDED],
            more,
            embeddings=embeddings,
            rows=90,
            target="helps",
            sample_weight=np.r_[np.ones(90), np.full(30, weight)],
        )
        for weight in (1.0, 5.0)
    )
    p = [c.logistic.head_probabilities(c.inputs(held, vectors))["helps"].mean() for c in (base, light, heavy)]
    assert p[0] < p[1] < p[2]


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        (np.full(89, 1.0), "one weight per row"),
        (np.r_[np.ones(89), -1.0], "non-negative"),
        (np.r_[np.ones(89), np.nan], "finite"),
    ],
)
def test_malformed_row_weights_are_refused(rows, weights, message) -> None:
    _, x, a, b = rows
    with pytest.raises(ValueError, match=message):
        fit_feature_combiner(x[:90], NAMES, a[:90], b[:90], model="logistic", sample_weight=weights)

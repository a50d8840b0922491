"""Saved gates and outcome files mutated at random (deterministically): a load either
succeeds, and the loaded gate decides, or raises the package's own error. No other
exception may come out of a loader, whatever the bytes."""

import contextlib
import gzip
import json
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adaptive_gates import DataFormatError, ExactMemory, GateLoadError, SKRKnnGate, load_outcomes
from adaptive_gates.persistence.saved_format import with_checksums
from adaptive_gates.records.data import write_jsonl
from support.saved_layouts import resign

QUESTIONS = ["who wrote hamlet", "capital of france", "when did ww2 end", "legs of a spider"]
FUZZ = settings(
    max_examples=80, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

#: A change of a file's bytes: flip one, cut the file, insert bytes, or empty it.
MUTATIONS = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 1 << 20), st.integers(1, 255)),
    st.tuples(st.just("cut"), st.integers(0, 1 << 20), st.just(0)),
    st.tuples(st.just("insert"), st.integers(0, 1 << 20), st.binary(min_size=1, max_size=8)),
)


def _mutate(data, mutation):
    kind, at, value = mutation
    at = at % (len(data) + 1)
    if kind == "flip" and data:
        at = min(at, len(data) - 1)
        return data[:at] + bytes([data[at] ^ value]) + data[at + 1 :]
    if kind == "insert":
        return data[:at] + value + data[at:]
    return data[:at]


@pytest.fixture(scope="module")
def saved(embedder, tmp_path_factory):
    """A small k-NN gate over ``ExactMemory`` (its files are all JSON and .npy)."""
    return (
        SKRKnnGate(embedder, k=2, memory=ExactMemory)
        .fit(QUESTIONS, [0, 1, 0, 1])
        .save(tmp_path_factory.mktemp("fuzz") / "g")
    )


def _load_and_decide(path, embedder):
    try:
        gate = SKRKnnGate.load(path, embedder=embedder, memory=ExactMemory)
    except GateLoadError:
        return
    gate.decide("who painted the mona lisa")


@FUZZ
@given(name=st.sampled_from(["config.json", "questions.json", "labels.npy", "vectors.npy"]), mutation=MUTATIONS)
def test_a_saved_gate_with_any_file_damaged_loads_or_is_refused(saved, embedder, tmp_path_factory, name, mutation):
    path = shutil.copytree(saved, tmp_path_factory.mktemp("case") / "g")
    (path / name).write_bytes(_mutate((path / name).read_bytes(), mutation))
    if name != "config.json":
        resign(path)
    _load_and_decide(path, embedder)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)


@FUZZ
@given(data=st.data())
def test_a_saved_gate_with_any_field_replaced_loads_or_is_refused(saved, embedder, tmp_path_factory, data):
    path = shutil.copytree(saved, tmp_path_factory.mktemp("case") / "g")
    config = json.loads((path / "config.json").read_text())
    fields = [(config, key) for key in config if key != "checksums"]
    fields += [(config[part], key) for part in ("params", "state") for key in config[part]]
    holder, key = data.draw(st.sampled_from(fields))
    holder[key] = data.draw(JSON_VALUES)
    (path / "config.json").write_text(json.dumps(with_checksums(config)))
    _load_and_decide(path, embedder)


@pytest.fixture(scope="module")
def outcome_lines(outcome_records):
    return [json.dumps(r.to_json()).encode() for r in outcome_records[:5]]


@FUZZ
@given(mutation=MUTATIONS, compressed=st.booleans())
def test_an_outcome_file_with_any_bytes_changed_loads_or_is_refused(
    outcome_lines, tmp_path_factory, mutation, compressed
):
    data = b"\n".join(outcome_lines) + b"\n"
    path = tmp_path_factory.mktemp("case") / ("o.jsonl.gz" if compressed else "o.jsonl")
    path.write_bytes(_mutate(gzip.compress(data, mtime=0), mutation) if compressed else _mutate(data, mutation))
    with contextlib.suppress(DataFormatError):
        load_outcomes(path)


@FUZZ
@given(data=st.data())
def test_an_outcome_record_with_any_field_replaced_loads_or_is_refused(outcome_records, tmp_path_factory, data):
    record = outcome_records[0].to_json()
    record[data.draw(st.sampled_from([*record, "extra"]))] = data.draw(JSON_VALUES)
    path = tmp_path_factory.mktemp("case") / "o.jsonl"
    write_jsonl(path, [record])
    with contextlib.suppress(DataFormatError):
        load_outcomes(path)

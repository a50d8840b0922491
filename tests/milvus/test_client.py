"""A Milvus collection of this package's shape, against a real Milvus Lite server."""

from __future__ import annotations

import re
import socket
import uuid

import numpy as np
import pytest

from adaptive_gates.errors import BackendUnavailableError, CollectionMismatchError
from adaptive_gates.milvus.client import (
    MAX_VARCHAR,
    PAGE_SIZE,
    VECTOR_FIELD,
    Field,
    MilvusCollection,
    check_varchar,
    checked_name,
    milvus_client,
)

FIELDS = (Field("id", "VARCHAR", primary=True, max_length=64), Field("label", "INT8"))
DIM = 4


@pytest.fixture
def name() -> str:
    """A collection name no other test uses."""
    return f"t_{uuid.uuid4().hex[:16]}"


def _rows(n, start=0, label=0):
    rng = np.random.default_rng(start)
    return [
        {"id": f"r{i}", "label": label, VECTOR_FIELD: rng.normal(size=DIM).astype(np.float32).tolist()}
        for i in range(start, start + n)
    ]


@pytest.mark.parametrize("good", ["a", "_x", "Questions_2024", "q" * 255])
def test_valid_collection_names(good):
    assert checked_name(good) == good


@pytest.mark.parametrize("bad", ["", "1abc", "with-dash", "with space", "q" * 256, "é", None, 3])
def test_invalid_collection_names(bad):
    with pytest.raises(ValueError, match="a Milvus collection name is a letter or underscore"):
        checked_name(bad)


def test_check_varchar_counts_utf8_bytes():
    check_varchar("text", "a" * MAX_VARCHAR, "passage p1")
    with pytest.raises(ValueError, match=f"passage p1: field 'text' is {MAX_VARCHAR + 1} bytes of UTF-8"):
        check_varchar("text", "é" * (MAX_VARCHAR // 2 + 1), "passage p1")  # fewer characters than bytes


def test_a_client_is_needed():
    with pytest.raises(TypeError, match=r"expected a Milvus URI or a pymilvus\.MilvusClient, got int"):
        milvus_client(19530)


def test_no_server_at_the_uri_is_named():
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(
        BackendUnavailableError, match=re.escape(f"cannot connect to Milvus at http://127.0.0.1:{port}")
    ):
        milvus_client(f"http://127.0.0.1:{port}")


@pytest.mark.milvus
def test_open_creates_then_reopens(milvus_uri, name):
    client = milvus_client(milvus_uri)
    assert milvus_client(client) is client
    assert not MilvusCollection.exists(client, name)
    collection = MilvusCollection.open(client, name, FIELDS, DIM)
    assert MilvusCollection.exists(client, name)
    assert (collection.name, collection.fields, collection.dimension) == (name, FIELDS, DIM)
    collection.insert(_rows(3))
    again = MilvusCollection.open(client, name, FIELDS, DIM)
    assert again.count() == 3
    with pytest.raises(ValueError, match="dimension must be a positive int"):
        MilvusCollection.open(client, name, FIELDS, 0)


@pytest.mark.milvus
def test_rows_are_written_counted_read_and_searched(milvus_uri, name):
    collection = MilvusCollection.open(milvus_client(milvus_uri), name, FIELDS, DIM)
    rows = _rows(PAGE_SIZE + 150) + _rows(5, start=5000, label=1)
    collection.insert(rows)
    assert collection.count() == len(rows)
    assert collection.count("label == 1") == 5
    read = list(collection.rows(["id", "label"]))  # more than one page
    assert sorted(r["id"] for r in read) == sorted(r["id"] for r in rows)
    assert {r["id"] for r in collection.rows(["id"], "label == 1")} == {f"r{i}" for i in range(5000, 5005)}
    queries = np.array([rows[7][VECTOR_FIELD], rows[-1][VECTOR_FIELD]], dtype=np.float32)
    found = collection.search(queries, 3, ["id", "label"])
    assert [row[0]["id"] for row in found] == ["r7", "r5004"]
    assert found[1][0]["label"] == 1
    assert found[0][0]["score"] == pytest.approx(1.0, abs=1e-4)  # cosine of a vector with itself
    scores = [hit["score"] for hit in found[0]]
    assert scores == sorted(scores, reverse=True)
    assert collection.search(np.zeros((0, DIM)), 3, ["id"]) == []


@pytest.mark.milvus
def test_upsert_replaces_and_delete_removes(milvus_uri, name):
    collection = MilvusCollection.open(milvus_client(milvus_uri), name, FIELDS, DIM)
    collection.insert(_rows(4))
    collection.upsert(_rows(2, label=1) + _rows(1, start=10))
    assert collection.count() == 5
    assert collection.count("label == 1") == 2
    collection.delete(["r0", "r10"])
    collection.delete([])
    assert sorted(r["id"] for r in collection.rows(["id"])) == ["r1", "r2", "r3"]


@pytest.mark.milvus
def test_a_released_collection_is_loaded_again(milvus_uri, name):
    collection = MilvusCollection.open(milvus_client(milvus_uri), name, FIELDS, DIM)
    collection.insert(_rows(3))
    collection.client.release_collection(name)
    assert collection.count() == 3
    assert collection.search(np.array([_rows(1)[0][VECTOR_FIELD]]), 1, ["id"])[0][0]["id"] == "r0"


@pytest.mark.milvus
def test_a_collection_of_another_shape_is_refused(milvus_uri, name):
    client = milvus_client(milvus_uri)
    MilvusCollection.open(client, name, FIELDS, DIM)
    with pytest.raises(CollectionMismatchError, match=f"{name!r} holds 4-d vectors, not 8-d ones"):
        MilvusCollection.open(client, name, FIELDS, 8)
    other = (Field("id", "VARCHAR", primary=True, max_length=64), Field("question", "VARCHAR", max_length=100))
    with pytest.raises(CollectionMismatchError, match=r"has the fields id \(VARCHAR, primary\), label \(INT8\)"):
        MilvusCollection.open(client, name, other, DIM)


@pytest.mark.milvus
def test_a_collection_not_searched_by_cosine_is_refused(milvus_uri, name):
    from pymilvus import DataType, MilvusClient

    client = milvus_client(milvus_uri)
    schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
    schema.add_field("label", DataType.INT8)
    schema.add_field(VECTOR_FIELD, DataType.FLOAT_VECTOR, dim=DIM)
    index = client.prepare_index_params()
    index.add_index(field_name=VECTOR_FIELD, index_type="FLAT", metric_type="L2")
    client.create_collection(name, schema=schema, index_params=index)
    with pytest.raises(CollectionMismatchError, match=r"indexes its vectors by \['L2'\], not by COSINE"):
        MilvusCollection.open(client, name, FIELDS, DIM)

"""The command line's values, checked as they are parsed."""

from __future__ import annotations

import argparse

import pytest

from adaptive_gates.cli import main
from adaptive_gates.cli.arguments import (
    MAX_TOP_LOGPROBS,
    base_url,
    concurrency,
    key_value,
    max_rate,
    max_tokens,
    non_negative_int,
    port,
    positive_int,
    rate,
    samples,
    seconds,
    share,
    top_logprobs,
)


def refused(parse, text):
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        parse(text)
    return str(caught.value)


def test_key_value_reads_json_or_keeps_a_bare_word():
    assert key_value("k=5") == ("k", 5)
    assert key_value("vote=majority") == ("vote", "majority")
    assert key_value("top-k=null") == ("top_k", None)
    assert key_value('stop=["\\n"]') == ("stop", ["\n"])
    assert key_value("x=") == ("x", "")
    assert "KEY=VALUE" in refused(key_value, "novalue")
    assert "KEY=VALUE" in refused(key_value, "=5")


def test_counts():
    assert positive_int("3") == 3
    for bad in ("0", "-1", "1.5", "many"):
        assert "positive integer" in refused(positive_int, bad)
    assert non_negative_int("0") == 0
    assert "integer >= 0" in refused(non_negative_int, "-2")
    assert top_logprobs(str(MAX_TOP_LOGPROBS)) == MAX_TOP_LOGPROBS
    assert f"at most {MAX_TOP_LOGPROBS}" in refused(top_logprobs, str(MAX_TOP_LOGPROBS + 1))
    assert port("8080") == 8080
    for bad in ("0", "65536", "http"):
        assert "port number from 1 to 65535" in refused(port, bad)


def test_rates_and_shares():
    assert rate("0.3") == 0.3
    for bad in ("0", "1", "nan", "1.5", "half"):
        assert "strictly between 0 and 1" in refused(rate, bad)
    assert max_rate("1") == 1.0
    assert "in (0, 1]" in refused(max_rate, "0")
    assert share("0") == 0.0 and share("1") == 1.0
    assert "in [0, 1]" in refused(share, "nan")
    assert seconds("2.5") == 2.5
    for bad in ("0", "inf", "-1", "soon", "nan"):
        assert "positive number of seconds" in refused(seconds, bad)
    assert seconds("86400") == 86400.0
    for huge in ("86400.5", "1e308"):
        assert "at most 86400" in refused(seconds, huge)


@pytest.mark.parametrize(
    ("parse", "high"), [(samples, 64), (max_tokens, 32768), (concurrency, 256)], ids=["samples", "tokens", "requests"]
)
def test_counts_with_an_upper_bound(parse, high):
    assert parse("1") == 1 and parse(str(high)) == high
    assert f"must be at most {high}, got '{high + 1}'" in refused(parse, str(high + 1))
    assert f"must be at most {high}" in refused(parse, str(10**20))
    assert "positive integer" in refused(parse, "0")


def test_base_urls():
    assert base_url("http://localhost:8000/v1").startswith("http://localhost:8000")
    for bad in ("localhost:8000", "ftp://host/v1", "http://"):
        refused(base_url, bad)


def test_a_bad_value_stops_the_command_before_any_work(capsys, no_work, split, tmp_path):
    status = main(
        [
            "eval",
            "--gate",
            "bm25-difficulty",
            "--train",
            str(split / "train.jsonl"),
            "--test",
            str(split / "test.jsonl"),
            "--json",
            str(tmp_path / "r.json"),
            "--target-rate",
            "1",
        ]
    )
    assert status == 2
    err = capsys.readouterr().err
    assert err.startswith("adaptive-gates: error:") and "--target-rate" in err and "strictly between 0 and 1" in err
    assert not (tmp_path / "r.json").exists()

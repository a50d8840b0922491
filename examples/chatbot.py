"""A terminal chatbot that retrieves only when its gate says so, offline.

Passages (BoolQ's Wikipedia passages by default) sit in an ``InMemoryVectorStore``
encoded by the embedded MiniLM; the embedded SmolLM2 answers. An SKR-kNN gate,
fitted on where retrieval helped on a few labelled questions (or on ``--outcomes``),
judges each turn: the question, after the earlier questions (at most ``--window``) it
leans on when it refers back (``adaptive_gates.answering.history_window``), or, with
``--condense``, the follow-up rewritten by the LLM as a standalone question. So "and
when did he die?" after "who wrote Hamlet?" is judged as the question it is.

Each turn prints what the gate judged, its decision and evidence (score, threshold,
nearest labelled questions), the passages retrieved if any, and the answer.

    python examples/chatbot.py                      # type questions; an empty line ends
    python examples/chatbot.py --script turns.txt   # one user turn per line
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Iterator
from pathlib import Path

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from adaptive_gates.models import default_embedder
from langchain_adaptive_gates import (
    AdaptiveGatesChatModel,
    AdaptiveGatesEmbeddings,
    GateRunnable,
    condense_question_chain,
    gated_router,
)
from rag_corpus import (
    RunLog,
    add_data_arguments,
    build_store,
    chat_chains,
    check_sizes,
    decision_lines,
    fitted_gate,
    load_data,
    qa_chains,
)


def user_turns(script: Path | None) -> Iterator[str]:
    """The user's turns: the script's non-blank lines, or what is typed until an
    empty line or end of input."""
    if script is not None:
        yield from (line.strip() for line in script.read_text(encoding="utf-8").splitlines() if line.strip())
        return
    while True:
        try:
            line = input("you> ").strip()
        except EOFError:
            return
        if not line:
            return
        yield line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_arguments(parser)
    parser.add_argument("--script", type=Path, help="one user turn per line (no typing)")
    parser.add_argument("--window", type=int, default=2, help="earlier questions a follow-up may lean on")
    parser.add_argument(
        "--condense",
        action="store_true",
        help="the gate judges the follow-up rewritten by the LLM as a standalone question",
    )
    parser.add_argument("--max-tokens", type=int, default=24, help="answer length cap")
    args = parser.parse_args()
    check_sizes(parser, args, "n_fit", "passages", "k", "max_tokens")
    if args.window < 0:
        parser.error("--window must be 0 or more")
    if args.script is not None and not args.script.is_file():
        parser.error(f"--script {args.script}: no such file")
    logging.basicConfig(level=logging.WARNING)

    records, corpus, instruction = load_data(args)
    embedder = default_embedder()
    store = build_store(corpus[: max(args.passages, args.n_fit)], AdaptiveGatesEmbeddings(embedder))
    llm = AdaptiveGatesChatModel(max_tokens=args.max_tokens)
    retriever = store.as_retriever(search_kwargs={"k": 1})
    gate = fitted_gate(args, records[: args.n_fit], *qa_chains(retriever, llm, instruction), embedder)
    judge = GateRunnable(
        gate, history_window=args.window, condense=condense_question_chain(llm) if args.condense else None
    )
    direct, rag = chat_chains(retriever, llm, "You are a helpful assistant. Answer briefly.")
    bot = gated_router(judge, direct=direct, retrieval=rag)
    how = "condensed by the LLM" if args.condense else f"with up to {args.window} earlier questions it leans on"
    print(f"chatbot ready: the gate judges each question {how}")

    history: list[BaseMessage] = []
    for turn, question in enumerate(user_turns(args.script), 1):
        log = RunLog()
        answer = bot.invoke({"question": question, "chat_history": history}, {"callbacks": [log]}).strip()
        decision = log.decisions[-1]
        print(f"\n[{turn}] you: {question}")
        print(f"   gate judged: {decision['question']!r}")
        print("\n".join(decision_lines(decision)))
        for document in log.retrieved[-1] if log.retrieved else []:
            print(f"   evidence: [{document.metadata.get('title', '')}] {document.page_content[:120]}...")
        print(f"   bot: {answer}")
        history += [HumanMessage(question), AIMessage(answer)]


if __name__ == "__main__":
    main()

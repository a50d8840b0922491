"""An existing LangChain RAG chain gets a retrieval gate, offline.

1. The chain a user already has: real passages (BoolQ's Wikipedia passages by
   default) in an ``InMemoryVectorStore`` encoded by the embedded MiniLM, a prompt,
   and the embedded SmolLM2 as a LangChain chat model.
2. A few labelled questions are answered by the LLM alone and by the RAG chain; an
   SKR-kNN gate learns where retrieval helped (or fit it on ``--outcomes``).
3. ``gated_router(gate, direct=..., retrieval=...)`` routes new questions: each
   decision is printed with its evidence (the nearest labelled questions), and the
   retrieval calls the chain no longer makes are counted from the callbacks.

With the 135M-parameter SmolLM2 on BoolQ the gate's choices are close to chance
(see docs/getting_started.md, "What the demo shows": the model answers "no" to nearly everything without passages);
the example shows the wiring, the evidence and the saving, not a better model.

    python examples/langchain_router.py --n 8 --n-fit 24
"""

from __future__ import annotations

import argparse
import logging
import time

from adaptive_gates import contains_answer
from adaptive_gates.models import default_embedder
from langchain_adaptive_gates import AdaptiveGatesChatModel, AdaptiveGatesEmbeddings, gated_router
from rag_corpus import (
    RunLog,
    add_data_arguments,
    build_store,
    check_sizes,
    decision_lines,
    fitted_gate,
    load_data,
    qa_chains,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_arguments(parser)
    parser.add_argument("--n", type=int, default=8, help="new questions routed through the gate")
    parser.add_argument("--max-tokens", type=int, default=8, help="answer length cap")
    args = parser.parse_args()
    check_sizes(parser, args, "n", "n_fit", "passages", "k", "max_tokens")
    logging.basicConfig(level=logging.WARNING)
    started = time.perf_counter()

    records, corpus, instruction = load_data(args)
    fit_records, new_records = records[: args.n_fit], records[args.n_fit : args.n_fit + args.n]
    if not new_records:
        parser.error(f"only {len(records)} questions: none left to route after --n-fit {args.n_fit}")
    passages = corpus[: max(args.passages, args.n_fit + args.n)]
    embedder = default_embedder()
    store = build_store(passages, AdaptiveGatesEmbeddings(embedder))
    llm = AdaptiveGatesChatModel(max_tokens=args.max_tokens)
    direct, rag = qa_chains(store.as_retriever(search_kwargs={"k": 1}), llm, instruction)
    print(f"RAG chain: {len(passages)} passages in an InMemoryVectorStore (MiniLM), SmolLM2 as the chat model")

    gate = fitted_gate(args, fit_records, direct, rag, embedder)
    router = gated_router(gate, direct=direct, retrieval=rag)

    log = RunLog()
    answers = router.batch([r.question for r in new_records], {"callbacks": [log]})
    by_question = {d["question"]: d for d in log.decisions}
    correct = 0
    for record, answer in zip(new_records, answers):
        decision = by_question[record.question]
        hit = bool(contains_answer(answer, record.answers))
        correct += hit
        print(f"\nQ: {record.question}")
        print("\n".join(decision_lines(decision)))
        print(f"   answer: {answer.strip()!r}  gold: {record.answers[0]!r}  {'correct' if hit else 'wrong'}")

    n, calls = len(new_records), len(log.retrieved)
    print(f"\nretrieval calls: {calls} of {n} questions ({n - calls} saved against the RAG chain alone)")
    print(f"answers containing the gold answer: {correct}/{n}")
    print(f"total time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()

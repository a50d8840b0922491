"""``adaptive-gates collect``: QA records (or plain questions) answered with and without
retrieval, by a local model or an OpenAI-compatible server, into outcome records
(resumable), each naming the model that answered."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..answering.answerer import DEFAULT_MAX_NEW_TOKENS
from ..answering.collection import DRAFTS
from ..errors import UsageError
from ..records.validation import MAX_CONCURRENCY, MAX_NEW_TOKENS
from .arguments import MAX_TOP_LOGPROBS, base_url, concurrency, max_tokens, positive_int, seconds, top_logprobs
from .backends import chat_model, corpus_retriever
from .files import bundled_help, data_file, input_file, output_file

#: The defaults: questions per batch, requests in flight to a server, and the
#: alternatives kept per token.
DEFAULT_BATCH_SIZE = 8
DEFAULT_CONCURRENCY = 4
DEFAULT_TOP_LOGPROBS = 5


def add_parser(sub: Any) -> None:
    col = sub.add_parser(
        "collect",
        help="answer QA records with and without retrieval, with a local model or through an "
        "OpenAI-compatible server, into outcome records (resumable)",
    )
    col.add_argument(
        "--qa",
        required=True,
        type=data_file,
        help="questions to answer: QA records (JSONL; 'answers' may be missing for questions without gold "
        'answers, e.g. your own traffic: such records get "answers": [], to be fitted on by agreement with the '
        "answer over passages), or a .txt file of plain questions, one a line" + bundled_help(),
    )
    col.add_argument("--corpus", required=True, type=input_file, help="corpus records (JSONL)")
    # An existing --out is the run to resume: it is appended to, never replaced.
    col.add_argument("--out", required=True, type=output_file, help="outcome records to write (appended, resumable)")
    col.add_argument("--retriever", default="bm25", choices=["bm25", "dense"])
    col.add_argument("--k", type=positive_int, default=3, help="passages per question")
    col.add_argument("--limit", type=positive_int, help="only the first N records")
    answering = col.add_mutually_exclusive_group()
    answering.add_argument(
        "--model", help="a local HF model id or path to answer with (default: embedded SmolLM2-135M-Instruct)"
    )
    answering.add_argument(
        "--chat-model",
        help="answer through an OpenAI-compatible server (OpenAI, vLLM, llama.cpp, Ollama): the model name it serves",
    )
    col.add_argument(
        "--base-url",
        type=base_url,
        help="with --chat-model: the server's base URL, e.g. "
        "http://localhost:8000/v1 (default: OPENAI_BASE_URL, else OpenAI's)",
    )
    col.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="with --chat-model: the environment variable holding "
        "the API key (default: OPENAI_API_KEY; a server given by --base-url may need none)",
    )
    col.add_argument(
        "--timeout",
        type=seconds,
        metavar="SECONDS",
        help="with --chat-model: how long one request may take before it is retried or fails "
        "(at most 86400, a day; default: 30)",
    )
    col.add_argument(
        "--concurrency",
        type=concurrency,
        metavar="N",
        help=f"with --chat-model: requests in flight at once (1..{MAX_CONCURRENCY}, default: {DEFAULT_CONCURRENCY})",
    )
    logprobs = col.add_mutually_exclusive_group()
    logprobs.add_argument(
        "--top-logprobs",
        type=top_logprobs,
        default=DEFAULT_TOP_LOGPROBS,
        metavar="K",
        help="keep the no-retrieval answer's token log-probs with K alternatives each "
        f"(1..{MAX_TOP_LOGPROBS}, default: {DEFAULT_TOP_LOGPROBS})",
    )
    logprobs.add_argument(
        "--no-logprobs",
        dest="top_logprobs",
        action="store_const",
        const=0,
        help="ask for no log-probs (for a server that refuses them)",
    )
    col.add_argument("--instruction", help="the answer instruction line")
    col.add_argument(
        "--draft",
        choices=DRAFTS,
        default="self-report",
        help="how the answer without retrieval is asked. self-report (default): the instruction, then "
        '"unknown" if the model does not know and "certain" or "uncertain" after the answer; the answer is '
        "recorded without that marker and the certainty as certainty_no_retrieval. That is what the "
        "draft-check gate drafts by default and what its cold start reads: what a model says about itself "
        "carried over to other models where fitted weights did not. plain: the instruction alone, as the "
        "bundled Llama-3.1-8B records were asked (for a gate with self_report=False). The answer with "
        "retrieval is always asked with the instruction alone",
    )
    col.add_argument(
        "--max-tokens",
        type=max_tokens,
        default=DEFAULT_MAX_NEW_TOKENS,
        metavar="N",
        help=f"new tokens at most per answer (1..{MAX_NEW_TOKENS}, default: {DEFAULT_MAX_NEW_TOKENS}; "
        "answers are a few words)",
    )
    col.add_argument(
        "--batch-size",
        type=positive_int,
        help="questions answered, then appended to --out, "
        f"at a time (default: {DEFAULT_BATCH_SIZE}, and at least --concurrency)",
    )
    col.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..answering.answerer import DEFAULT_INSTRUCTION, LLMAnswerer
    from ..answering.collection import collect_outcomes, outcome_usage
    from ..models.lm.local import LocalCausalLM
    from ..records.data import load_qa

    if args.chat_model is None and args.concurrency is not None:
        raise UsageError("--concurrency goes with --chat-model (a local model answers a batch at once)")
    if args.api_key_env is not None and args.chat_model is None:
        raise UsageError("--api-key-env goes with --chat-model")
    if args.timeout is not None and args.chat_model is None:
        raise UsageError("--timeout goes with --chat-model")
    chat = chat_model(args)
    concurrency = args.concurrency or DEFAULT_CONCURRENCY
    # A batch is what is in flight at most: never fewer questions than requests allowed.
    batch_size = args.batch_size or (max(DEFAULT_BATCH_SIZE, concurrency) if chat else DEFAULT_BATCH_SIZE)
    records = load_qa(args.qa, gold=False)[: args.limit]
    retriever = corpus_retriever(args.retriever, args.corpus)
    answerer = LLMAnswerer(
        chat or (LocalCausalLM(args.model) if args.model else None),
        instruction=args.instruction or DEFAULT_INSTRUCTION,
        max_new_tokens=args.max_tokens,
        batch_size=batch_size,
        max_workers=concurrency if chat else 1,
    )
    outcomes = collect_outcomes(
        records,
        answerer,
        retriever,
        args.out,
        k=args.k,
        batch_size=batch_size,
        top_logprobs=args.top_logprobs,
        progress=sys.stderr.isatty(),  # a bar for a person watching, not for a log file
        draft=args.draft,
    )
    usage = outcome_usage(outcomes)
    print(
        f"{len(outcomes)} outcome records of {answerer.chat.model_id} in {args.out} ({args.draft} drafts; "
        f"{usage.prompt_tokens} prompt tokens, {usage.completion_tokens} completion tokens)"
    )
    return 0

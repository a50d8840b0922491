"""Collecting self-knowledge (SPEC §1.1): answer each question without and with
retrieval and keep both answers as outcome records.

Records are appended to the output file batch by batch, so an interrupted run
resumes where it stopped: questions whose id is already in the file are skipped, and
a record the interruption cut short is set aside (see ``recover_torn_tail``).

With an answerer that gives its replies (``LLMAnswerer``), each record also keeps the
no-retrieval answer's token log-probs (``logprobs_no_retrieval``, for gates that read
them) and what each answer cost in tokens (``usage``), whose sum over a file is the
collection's cost (``outcome_usage``), and names the model that answered (``llm``,
``MODEL_FIELD``: a gate fitted on the records records whose they are).

With ``draft="self-report"`` the answer without retrieval is asked with the
self-report instruction (``answering.self_report``: the answer or "unknown", then
"certain" or "uncertain"): ``pred_no_retrieval`` is the answer without its marker and
``certainty_no_retrieval`` the certainty stated (``null`` when none was), which is
what the draft-check gate's cold start and its ``self_report`` columns read. The answer
with retrieval keeps the answerer's plain instruction over the passages.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..models.chat.base import TokenUsage
from ..records.data import OutcomeRecord, QARecord, load_outcomes, recover_torn_tail, write_jsonl
from ..retrieval.base import Hit, Retriever
from .answerer import Answer, Answerer, LLMAnswerer, ReplyAnswerer, build_prompt
from .self_report import CERTAINTY_FIELD, read_self_report, self_report_instruction

logger = logging.getLogger(__name__)

#: The ``usage`` field of a record: the tokens of each of its two answers.
USAGE_FIELD = "usage"
_ANSWERS = ("no_retrieval", "one_retrieval")
#: The field naming the model that answered: the one ``gates.base.fitted_on`` reads
#: (``MODEL_FIELD``) to record whose outcomes a gate was fitted on.
MODEL_FIELD = "llm"
#: How the answer without retrieval is asked: with the self-report instruction, or
#: with the answerer's own.
DRAFTS = ("self-report", "plain")


def collect_outcomes(
    records: Sequence[QARecord],
    answerer: Answerer,
    retriever: Retriever,
    out_path: str | Path,
    *,
    k: int = 3,
    batch_size: int = 8,
    top_logprobs: int = 0,
    progress: bool = True,
    draft: str = "plain",
    llm: str | None = None,
) -> list[OutcomeRecord]:
    """Answer every record without and with its top-``k`` passages.

    ``batch_size`` questions are answered, then appended, at a time; a remote answerer
    keeps its ``max_workers`` requests in flight within a batch, so a batch should be
    at least that large. With ``top_logprobs > 0`` the no-retrieval answer's tokens are
    kept with that many alternatives each (the answerer must give its replies, see
    ``ReplyAnswerer``; a backend that gives no log-probs leaves them out). The tokens
    spent are shown on the progress bar and logged. ``draft="self-report"`` asks the
    answer without retrieval with the self-report instruction (see the module; the
    answerer must be an ``LLMAnswerer``). ``llm`` names the answering model in each
    record (default: the ``LLMAnswerer``'s chat model's id). A file being resumed must
    have been collected by the same model and the same kind of draft.

    Returns all outcome records of ``out_path`` that belong to ``records``,
    in the order of ``records`` (earlier runs' included).
    """
    from tqdm.auto import tqdm

    if not isinstance(top_logprobs, int) or isinstance(top_logprobs, bool) or top_logprobs < 0:
        raise ValueError(f"top_logprobs must be an int >= 0, got {top_logprobs!r}")
    if draft not in DRAFTS:
        raise ValueError(f"draft must be one of {DRAFTS}, got {draft!r}")
    if draft == "self-report" and not isinstance(answerer, LLMAnswerer):
        raise TypeError(
            f"draft='self-report' asks the answerer's chat model: pass an LLMAnswerer, got {type(answerer).__name__}"
        )
    if llm is None and isinstance(answerer, LLMAnswerer):
        llm = answerer.chat.model_id
    replying = answerer if isinstance(answerer, ReplyAnswerer) else None
    if top_logprobs and replying is None:
        raise TypeError(
            f"top_logprobs={top_logprobs} needs an answerer with answer_replies (e.g. LLMAnswerer), "
            f"got {type(answerer).__name__}"
        )
    out_path = Path(out_path)
    ids = [r.id for r in records]
    repeated = sorted(i for i, n in Counter(ids).items() if n > 1)
    if repeated:
        raise ValueError(
            f"QA records must have unique ids to be collected resumably; repeated: {', '.join(map(repr, repeated))}"
        )
    done: dict[str, OutcomeRecord] = {}
    if out_path.exists():
        recover_torn_tail(out_path)  # an interrupted run may have stopped inside a record
        if out_path.stat().st_size:
            done = {r.id: r for r in load_outcomes(out_path)}
            _check_resumable(out_path, list(done.values()), llm, draft)
    todo = [r for r in records if r.id not in done]
    if done:
        logger.info("%s: resuming, %d of %d already collected", out_path, len(records) - len(todo), len(records))
    out_path.parent.mkdir(parents=True, exist_ok=True)
    spent = TokenUsage(0, 0)
    with tqdm(total=len(todo), desc="collecting outcomes", unit="q", disable=not progress) as bar:
        for start in range(0, len(todo), batch_size):
            batch = todo[start : start + batch_size]
            questions = [r.question for r in batch]
            hits = retriever.search_batch(questions, k=k)
            passages = [[h.as_passage() for h in row] for row in hits]
            certainties: list[str | None] | None = None
            if isinstance(answerer, LLMAnswerer) and draft == "self-report":
                replies_without, certainties = self_report_answers(answerer, questions, top_logprobs=top_logprobs)
                replies_with = answerer.answer_replies(questions, passages)
                new = [
                    _outcome(r, row, a0.text, a1.text, llm, (a0, a1))
                    for r, row, a0, a1 in zip(batch, hits, replies_without, replies_with)
                ]
            elif replying is not None:
                replies_without = replying.answer_replies(questions, top_logprobs=top_logprobs)
                replies_with = replying.answer_replies(questions, passages)
                new = [
                    _outcome(r, row, a0.text, a1.text, llm, (a0, a1))
                    for r, row, a0, a1 in zip(batch, hits, replies_without, replies_with)
                ]
            else:
                without, with_ = answerer.answer_batch(questions), answerer.answer_batch(questions, passages)
                new = [_outcome(r, row, a0, a1, llm) for r, row, a0, a1 in zip(batch, hits, without, with_)]
            if certainties is not None:
                new = [_with_certainty(o, c) for o, c in zip(new, certainties)]
            write_jsonl(out_path, [o.to_json() for o in new], append=True)
            done.update({o.id: o for o in new})
            spent += outcome_usage(new)
            bar.update(len(batch))
            bar.set_postfix(prompt_tokens=spent.prompt_tokens, completion_tokens=spent.completion_tokens)
    if todo:
        logger.info(
            "%s: %d questions answered both ways, %d prompt and %d completion tokens",
            out_path,
            len(todo),
            spent.prompt_tokens,
            spent.completion_tokens,
        )
    return [done[i] for i in ids]


def self_report_answers(
    answerer: LLMAnswerer, questions: Sequence[str], *, top_logprobs: int = 0
) -> tuple[list[Answer], list[str | None]]:
    """The answers without retrieval asked with the self-report instruction (the
    answerer's instruction, then the self-report request), each without its certainty
    marker, and the certainty each states. Greedy, at most the answerer's
    ``max_new_tokens``, and with no stop at a line's end: a model may state its
    certainty on the line after the answer, and the whole reply is read."""
    from ..models.chat.base import ChatOptions, user
    from ..models.chat.batch import chat_many

    instruction = self_report_instruction(answerer.instruction)
    conversations = [user(build_prompt(q, None, instruction)) for q in questions]
    options = ChatOptions(max_tokens=answerer.max_new_tokens, temperature=0.0)
    if top_logprobs:
        options["top_logprobs"] = top_logprobs
    replies = chat_many(answerer.chat, conversations, max_workers=answerer.max_workers, **options)
    reports = [read_self_report(r.text) for r in replies]
    return [Answer(report.answer, r) for report, r in zip(reports, replies)], [r.certainty for r in reports]


def _check_resumable(path: Path, done: list[OutcomeRecord], llm: str | None, draft: str) -> None:
    """Refuse to append to a file collected by another model or with another kind of
    draft: one file of outcomes is one model's, asked one way."""
    models = sorted({str(r.extra[MODEL_FIELD]) for r in done if r.extra.get(MODEL_FIELD)})
    if llm is not None and models and models != [llm]:
        raise ValueError(
            f"{path} holds outcomes of {', '.join(models)}, not of {llm}: write this model's outcomes to another file"
        )
    kinds = sorted({"self-report" if CERTAINTY_FIELD in r.extra else "plain" for r in done})
    if kinds != [draft]:
        raise ValueError(f"{path} holds {' and '.join(kinds)} drafts, not {draft} ones: resume with --draft {kinds[0]}")


def outcome_usage(records: Iterable[OutcomeRecord]) -> TokenUsage:
    """The tokens the records' answers cost, from their ``usage`` fields (answers whose
    backend reported no usage count nothing)."""
    total = TokenUsage(0, 0)
    for record in records:
        usage = record.extra.get(USAGE_FIELD)
        if not isinstance(usage, dict):
            continue
        for name in _ANSWERS:
            total += TokenUsage.from_openai(usage.get(name)) or TokenUsage(0, 0)
    return total


def _outcome(
    record: QARecord,
    hits: Sequence[Hit],
    without: str,
    with_: str,
    llm: str | None,
    replies: tuple[Answer, Answer] | None = None,
) -> OutcomeRecord:
    """The outcome record of one question from its two answers, naming the model that
    gave them (``llm``); ``replies`` (the two ``Answer``s, when the answerer gives them)
    add the log-probs and token usage."""
    extra: dict[str, Any] = {"retrieved": [h.id for h in hits]}
    if llm is not None:
        extra[MODEL_FIELD] = llm
    usage = {name: a.usage.to_json() for name, a in zip(_ANSWERS, replies or ()) if a.usage is not None}
    if usage:
        extra[USAGE_FIELD] = usage
    return OutcomeRecord(
        id=record.id,
        question=record.question,
        answers=list(record.answers),
        pred_no_retrieval=without,
        pred_one_retrieval=with_,
        extra=extra,
        logprobs_no_retrieval=replies[0].tokens if replies else None,
    )


def _with_certainty(record: OutcomeRecord, certainty: str | None) -> OutcomeRecord:
    """``record`` with the certainty stated with its answer without retrieval (``null``
    when none was: the field says the answer was asked for one)."""
    return replace(record, extra={**record.extra, CERTAINTY_FIELD: certainty})

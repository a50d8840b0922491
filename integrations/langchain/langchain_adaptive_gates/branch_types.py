"""A router's input and output types, read from its branches.

A router passes its input to one branch and returns that branch's output, so its
types are the branches': the input of the first branch that declares one (a
prompt's variables, say), the output common to all branches (``str`` after a
``StrOutputParser``, a message for chat-model chains). LangServe and other
schema-driven tools read them through ``get_input_schema``/``get_output_schema``.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Sequence
from typing import Annotated, Any, Union, get_args, get_origin

from langchain_core.messages import AnyMessage, BaseMessage
from langchain_core.runnables import Runnable


def input_source(branches: Sequence[Runnable], fallback: Runnable) -> Runnable:
    """The first of ``branches`` whose input type is known, else ``fallback``."""
    return next((b for b in branches if b.InputType != Any), fallback)


def common_output_type(branches: Sequence[Runnable]) -> Any:
    """The output type of every one of ``branches``.

    One type when they agree; ``AnyMessage`` when all give messages of differing
    kinds; the nearest shared base class of plain classes; else ``Any``.
    """
    outputs = [b.OutputType for b in branches]
    if not outputs:
        return Any
    first = outputs[0]
    if all(t == first for t in outputs):
        return first
    if all(is_message_type(t) for t in outputs):
        return AnyMessage
    if all(inspect.isclass(t) for t in outputs):
        for base in first.__mro__[:-1]:  # every class derives from object: no common type
            if all(issubclass(t, base) for t in outputs):
                return base
    return Any


def is_message_type(annotation: Any) -> bool:
    """Whether every value of ``annotation`` is a LangChain message (a message class,
    or an annotated union of them such as a chat model's ``AnyMessage``)."""
    members = _members(annotation)
    return bool(members) and all(inspect.isclass(m) and issubclass(m, BaseMessage) for m in members)


def _members(annotation: Any) -> list[Any]:
    """The types a value of ``annotation`` may have: unions and ``Annotated`` opened."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _members(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        return [m for arg in get_args(annotation) for m in _members(arg)]
    return [annotation]

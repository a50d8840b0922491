"""A router's input and output types, read from its branches.

A router passes its input unchanged to one branch and returns that branch's output,
so its types are the branches': the input every branch accepts (``agreed_input``),
the output common to all branches (``str`` after a ``StrOutputParser``, a message for
chat-model chains). LangServe and other schema-driven tools read them through
``get_input_schema``/``get_output_schema``.

What a branch accepts is read as LangChain reads it: a sequence by its first step, a
bound runnable by the runnable it binds, a parallel map by what all its steps accept
(each receives the same input), a prompt by its variables as a dict, or by a string
too when it has one variable (LangChain fills that variable with a value that is not a
dict), any other runnable by its input schema. Two dict shapes agree on the dict with
the keys of both; any other two forms agree only when they are the same type.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Union, get_args, get_origin

from langchain_core.messages import AnyMessage, BaseMessage
from langchain_core.prompts import BasePromptTemplate
from langchain_core.runnables import Runnable, RunnableBinding, RunnableParallel, RunnableSequence
from langchain_core.utils.pydantic import create_model_v2
from pydantic import BaseModel, RootModel

#: The forms of input a runnable accepts: types (``str``, a dict shape as a pydantic
#: model, a message list...), or ``None`` when it declares none (it takes any value).
Forms = list[Any] | None


class DisagreeingBranchesError(ValueError):
    """Branches of one router that accept no input in common: whatever the router is
    given, one of them cannot read it."""


@dataclass(frozen=True)
class AgreedInput:
    """The input the branches of a router agree on: its type (a model, or a union of
    the forms) and its schema; ``None`` when no branch declares one."""

    annotation: Any
    schema: type[BaseModel]


def agreed_input(branches: Mapping[str, Runnable], name: str) -> AgreedInput | None:
    """The input every one of ``branches`` (by route name) accepts, as a type and a
    schema named ``name``; ``None`` when none declares its input.

    Raises ``DisagreeingBranchesError`` naming each branch's forms when they accept no
    input in common."""
    declared = {route: forms for route, forms in ((r, accepted_forms(b)) for r, b in branches.items()) if forms}
    if not declared:
        return None
    agreed: list[Any] = next(iter(declared.values()))
    for forms in declared.values():
        agreed = _meet_all(agreed, forms)
    if not agreed:
        shapes = "; ".join(f"{route!r} takes {_describe(forms)}" for route, forms in declared.items())
        raise DisagreeingBranchesError(
            f"the routes accept no input in common ({shapes}). A router passes its input unchanged to the "
            "route it chooses, so every route must read the same input: start each with the same prompt "
            "variables, or let a route read its part of a dict (e.g. operator.itemgetter('question') before "
            "a retriever)"
        )
    if len(agreed) == 1 and _is_dict_model(agreed[0]):
        return AgreedInput(agreed[0], agreed[0])
    annotation = agreed[0] if len(agreed) == 1 else Union[tuple(agreed)]  # noqa: UP007  # a union built at run time
    return AgreedInput(annotation, create_model_v2(name, root=annotation))


def accepted_forms(runnable: Runnable) -> Forms:
    """The forms of input ``runnable`` accepts (see the module's doc); ``None`` when it
    declares none."""
    if isinstance(runnable, RunnableSequence):
        return accepted_forms(runnable.first)
    if isinstance(runnable, RunnableBinding):
        return accepted_forms(runnable.bound)
    if isinstance(runnable, RunnableParallel):
        agreed: Forms = None
        for step in runnable.steps__.values():
            forms = accepted_forms(step)
            if forms is not None:
                agreed = forms if agreed is None else _meet_all(agreed, forms)
        return agreed
    schema = runnable.get_input_schema()
    if isinstance(runnable, BasePromptTemplate):
        return [schema, str] if len(runnable.input_variables) == 1 else [schema]
    if not issubclass(schema, BaseModel):  # a pydantic v1 model: compared as a whole
        return [schema]
    if issubclass(schema, RootModel) or ("root" in schema.model_fields and len(schema.model_fields) == 1):
        members = _members(schema.model_fields["root"].annotation)
        if any(m is Any for m in members):
            return None
        return [m for i, m in enumerate(members) if m not in members[:i]]  # once each; not all hash
    return [schema]


def _meet_all(left: list[Any], right: list[Any]) -> list[Any]:
    """The forms both lists accept."""
    met: list[Any] = []
    for a in left:
        for b in right:
            form = _meet(a, b)
            if form is not None and form not in met:
                met.append(form)
    return met


def _meet(a: Any, b: Any) -> Any:
    """The form that is both ``a`` and ``b``, or ``None``."""
    if a == b:
        return a
    if _is_dict_model(a) and _is_dict_model(b):
        return _merged(a, b)
    if _is_dict_model(a) and _is_dict_type(b):
        return a
    if _is_dict_type(a) and _is_dict_model(b):
        return b
    return None


def _merged(a: type[BaseModel], b: type[BaseModel]) -> type[BaseModel] | None:
    """The dict shape with the keys of both (a key's type must agree), or ``None``."""
    fields: dict[str, Any] = {}
    for model in (a, b):
        for key, field in model.model_fields.items():
            annotation = field.annotation
            required = field.is_required()
            if key in fields:
                known, was_required = fields[key]
                if known != annotation and Any not in (known, annotation):
                    return None
                annotation = known if annotation is Any else annotation
                required = required or was_required
            fields[key] = (annotation, required)
    for model in (a, b):  # one holds the other: it is the shape
        same = all(fields[k] == (f.annotation, f.is_required()) for k, f in model.model_fields.items())
        if set(fields) == set(model.model_fields) and same:
            return model
    definitions = {key: (annotation, ... if required else None) for key, (annotation, required) in fields.items()}
    return create_model_v2(f"{a.__name__}And{b.__name__}", field_definitions=definitions)


def _is_dict_model(form: Any) -> bool:
    return (
        inspect.isclass(form)
        and issubclass(form, BaseModel)
        and not issubclass(form, (RootModel, BaseMessage))
        and "root" not in form.model_fields
    )


def _is_dict_type(form: Any) -> bool:
    origin = get_origin(form) or form
    return inspect.isclass(origin) and issubclass(origin, Mapping)


def _describe(forms: list[Any]) -> str:
    def one(form: Any) -> str:
        if form is str:
            return "a string"
        if _is_dict_model(form):
            return f"a dict with keys {sorted(k for k, f in form.model_fields.items() if f.is_required())}"
        return getattr(form, "__name__", None) or repr(form)

    return " or ".join(one(f) for f in forms)


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

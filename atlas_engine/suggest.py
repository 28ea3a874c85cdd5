"""The nearest valid name for a wrong one (a model id, a body's field): "did you mean ...?"."""

from __future__ import annotations

import difflib
import types
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Literal, Union, get_args, get_origin

from pydantic import BaseModel


def close_matches(
    word: str, choices: Iterable[str] | Mapping[str, str], n: int = 3, cutoff: float = 0.6
) -> list[str]:
    """The choices nearest `word` (difflib's ratio at least `cutoff`, case ignored), nearest
    first. `choices` may map each name to match to what to suggest for it (an id by its short
    name)."""
    suggest = choices if isinstance(choices, Mapping) else {c: c for c in choices}
    folded: dict[str, str] = {}
    for name, suggestion in suggest.items():
        folded.setdefault(name.casefold(), suggestion)
    nearest = difflib.get_close_matches(word.casefold(), folded, n=n, cutoff=cutoff)
    return list(dict.fromkeys(folded[name] for name in nearest))


def did_you_mean(names: Sequence[str]) -> str:
    """'did you mean 'a'?' or 'did you mean 'a' or 'b'?'."""
    return "did you mean " + " or ".join(repr(name) for name in names) + "?"


def _members(annotation: object) -> list[object]:
    """The types an annotation admits: Annotated unwrapped, a union split, None left out."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _members(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        return [t for arg in get_args(annotation) for t in _members(arg)]
    return [] if annotation is type(None) else [annotation]


def _is_model(annotation: object) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _tags(model: type[BaseModel]) -> set[object]:
    """The names pydantic puts in an error's location for this member of a union: its class
    name, and the values of its Literal fields (a discriminated union's tag)."""
    tags: set[object] = {model.__name__}
    for field in model.model_fields.values():
        if get_origin(field.annotation) is Literal:
            tags.update(get_args(field.annotation))
    return tags


def fields_at(model: type[BaseModel], path: Sequence[str | int]) -> list[str]:
    """The field names of the object at `path` in a body of `model`, for a validation error's
    location (without its leading 'body' and its last part, the unknown field): e.g.
    ('heads', 0) in an AblationRequest is a HeadRef, ['layer', 'head']. [] where the path does
    not lead to a model."""
    here: list[object] = [model]
    for part in path:
        step: list[object] = []
        for annotation in (t for a in here for t in _members(a)):
            if isinstance(part, int) and get_origin(annotation) in (list, tuple):
                step.extend(get_args(annotation)[:1])
            elif _is_model(annotation) and part in annotation.model_fields:
                step.append(annotation.model_fields[part].annotation)
            elif _is_model(annotation) and part in _tags(annotation):
                step.append(annotation)  # the member of a union pydantic tried
        here = step
    models = [t for a in here for t in _members(a) if _is_model(t)]
    return list(dict.fromkeys(name for m in models for name in m.model_fields))

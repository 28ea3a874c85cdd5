"""The lessons a server offers: those shipped in atlas_engine/lessons and those in the operator's
ATLAS_LESSONS_DIR, each checked against the format (atlas_engine/schemas/lessons.py) when listed."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import get_args

from pydantic import BaseModel, ValidationError

from atlas_engine.errors import InvalidInput, NotFound
from atlas_engine.schemas.lessons import (
    MAX_LESSON_BYTES,
    HeadQuestion,
    KeyQuestion,
    Lesson,
    LessonList,
    LessonSummary,
    Step,
)
from atlas_engine.suggest import close_matches

SHIPPED = Path(__file__).resolve().parent.parent / "lessons"
log = logging.getLogger(__name__)


def _read(path: Path) -> Lesson | None:
    """One lesson file, or None (logged) where it is too big or not a valid lesson."""
    try:
        if path.stat().st_size > MAX_LESSON_BYTES:
            raise ValueError(f"larger than {MAX_LESSON_BYTES} bytes")
        return Lesson.model_validate_json(path.read_bytes())
    except (OSError, ValueError, ValidationError) as err:
        log.warning("lesson %s skipped: %s", path, err)
        return None


def lessons(lessons_dir: str | None) -> dict[str, tuple[Lesson, str]]:
    """{id: (lesson, "shipped" | "served")}, shipped first; a served lesson does not replace a
    shipped one of the same id (it is skipped, logged)."""
    found: dict[str, tuple[Lesson, str]] = {}
    folders = [(SHIPPED, "shipped")]
    if lessons_dir:
        folders.append((Path(lessons_dir), "served"))
    for folder, source in folders:
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            lesson = _read(path)
            if lesson is None:
                continue
            if lesson.id in found:
                log.warning("lesson %s skipped: the id %r is taken", path, lesson.id)
                continue
            found[lesson.id] = (lesson, source)
    return found


def list_lessons(lessons_dir: str | None) -> LessonList:
    return LessonList(
        lessons=[
            LessonSummary(
                id=lesson.id,
                title=lesson.title,
                summary=lesson.summary,
                steps=len(lesson.steps),
                source=source,
            )
            for lesson, source in lessons(lessons_dir).values()
        ]
    )


def get_lesson(lessons_dir: str | None, lesson_id: str) -> Lesson:
    found = lessons(lessons_dir)
    if lesson_id not in found:
        raise NotFound(f"no lesson {lesson_id!r}; there are {sorted(found)}")
    return found[lesson_id][0]


def check_lesson(text: str) -> Lesson:
    """A pasted lesson (JSON text), checked: the lesson, or InvalidInput saying what is wrong."""
    if len(text.encode()) > MAX_LESSON_BYTES:
        raise InvalidInput(f"a lesson is at most {MAX_LESSON_BYTES} bytes of JSON")
    try:
        return Lesson.model_validate(json.loads(text))
    except json.JSONDecodeError as err:
        raise InvalidInput(f"not JSON: {err.msg} at line {err.lineno}, column {err.colno}") from err
    except ValidationError as err:
        count = err.error_count()
        more = "" if count == 1 else f" ({count} problems in all; this is the first)"
        raise InvalidInput(f"{problem(err.errors()[0])}{more}") from err


def field_name(loc: tuple) -> str:
    """Where in a lesson, as a teacher reads it: ('steps', 1, 'page') -> "step 2's page" (a
    question's kind, which pydantic puts in the location, is left out)."""
    words: list[str] = []
    for i, part in enumerate(loc):
        if isinstance(part, int) and i and loc[i - 1] == "steps":
            words[-1] = f"step {part + 1}"
        elif isinstance(part, int):
            words.append(f"item {part + 1}")
        elif not (i and loc[i - 1] == "question" and part in QUESTION_KINDS):
            words.append(str(part))
    return "'s ".join(words) if words else "the lesson"


def problem(error: dict) -> str:
    """One problem of a pasted lesson in the project's words: the field, what is wrong with it
    and, where there is one, the closest allowed value (never the whole list of them)."""
    where, kind, given = field_name(error["loc"]), error["type"], error.get("input")
    ctx = error.get("ctx") or {}
    if kind == "value_error":  # our own validators' words, without pydantic's "Value error, "
        return f"{where}: {ctx.get('error', error['msg'])}"
    if kind == "union_tag_invalid":  # a question's kind
        tags = re.findall(r"'([^']*)'", ctx.get("expected_tags", ""))
        return f"{where}: {ctx.get('tag')!r} is not a kind of question; {_closest(str(ctx.get('tag')), tags)}"
    if kind == "extra_forbidden":
        model = _model_at(error["loc"][:-1])
        fields = list(model.model_fields) if model else []
        owner = SCHEMA_NAMES.get(model, "this part of a lesson")
        return f"{where} is not a field of {owner}; {_closest(str(error['loc'][-1]), fields)}"
    if kind == "missing":
        return f"{where} is missing"
    if kind in ("string_too_long", "too_long"):
        return f"{where} is too long: at most {ctx.get('max_length')}"
    if kind in ("string_too_short", "too_short"):
        return f"{where} is too short: at least {ctx.get('min_length')}"
    if kind == "string_pattern_mismatch":
        return f"{where}: {given!r} does not have the form {ctx.get('pattern')}"
    return f"{where}: {error['msg'][0].lower()}{error['msg'][1:]}"


def _closest(word: str, allowed: list[str]) -> str:
    nearest = close_matches(word, allowed, n=1)
    return (
        f"the closest is {nearest[0]!r}" if nearest else f"one of {', '.join(map(repr, allowed))}"
    )


def _model_at(loc: tuple) -> type[BaseModel] | None:
    """The schema a location inside a lesson names (Lesson, Step, a question), where known."""
    model: type[BaseModel] | None = Lesson
    for i, part in enumerate(loc):
        if isinstance(part, int) or model is None:
            continue
        if part in QUESTION_KINDS and i and loc[i - 1] == "question":
            model = QUESTION_KINDS[part]
            continue
        annotation = model.model_fields[part].annotation if part in model.model_fields else None
        model = next(iter(_models(annotation)), None)
    return model


def _models(annotation: object) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds (a list's items, an optional's value)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models(arg)]


QUESTION_KINDS = {"key": KeyQuestion, "head": HeadQuestion}
SCHEMA_NAMES = {Lesson: "a lesson", Step: "a step", KeyQuestion: "a key question",
                HeadQuestion: "a head question"}  # fmt: skip

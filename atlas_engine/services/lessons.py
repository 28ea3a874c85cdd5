"""The lessons a server offers: those shipped in atlas_engine/lessons and those in the operator's
ATLAS_LESSONS_DIR, each checked against the format (atlas_engine/schemas/lessons.py) when listed."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from pydantic import ValidationError

from atlas_engine.errors import InvalidInput, NotFound
from atlas_engine.schemas.lessons import MAX_LESSON_BYTES, Lesson, LessonList, LessonSummary

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
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the lesson"
        raise InvalidInput(
            f"{where}: {first['msg']} ({err.error_count()} problem(s) in all)"
        ) from err

"""Lessons (GET /api/lessons ...): what /learn lists and plays; the format is docs/lessons.md."""

from fastapi import APIRouter, Body, Path

from app.api.responses import BODY_ROUTE, errors
from app.api.strict_json import StrictJSONRoute
from app.deps import SettingsDep
from atlas_engine.schemas.lessons import LESSON_ID, MAX_LESSON_BYTES, Lesson, LessonList
from atlas_engine.services.lessons import check_lesson, get_lesson, list_lessons

router = APIRouter(prefix="/api/lessons", tags=["lessons"], route_class=StrictJSONRoute)


@router.get(
    "", response_model=LessonList, summary="Lessons this server offers", responses=errors(429)
)
def lessons(settings: SettingsDep) -> LessonList:
    """The shipped lessons, then the operator's (ATLAS_LESSONS_DIR), each checked."""
    return list_lessons(settings.lessons_dir)


@router.post(
    "/check",
    response_model=Lesson,
    summary="Check a lesson written by hand",
    responses=errors(*BODY_ROUTE),
)
def check(
    text: str = Body(
        embed=True,
        max_length=MAX_LESSON_BYTES,
        description="The lesson's JSON, as text (what a teacher pastes into /learn).",
    ),
) -> Lesson:
    """The lesson as the player will read it, or 422 naming the first problem and the count."""
    return check_lesson(text)


@router.get(
    "/{lesson_id}",
    response_model=Lesson,
    summary="One lesson, step by step",
    responses=errors(404, 422, 429, e404="No lesson of that id; the detail lists the ids."),
)
def lesson(
    settings: SettingsDep,
    lesson_id: str = Path(description="A lesson id from GET /api/lessons.", pattern=LESSON_ID),
) -> Lesson:
    return get_lesson(settings.lessons_dir, lesson_id)

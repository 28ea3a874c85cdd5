"""Lessons: an ordered list of steps, each a page of Atlas (any explorer, lab or Deep zoom
state, by its link), a caption, and optionally a question the learner answers by clicking in
the view, checked against the real numbers the view shows. The format is docs/lessons.md's."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from atlas_engine.lab_topics import LAB_TOPICS
from atlas_engine.suggest import close_matches

MAX_STEPS = 40
MAX_CAPTION_CHARS = 2_000
MAX_LESSON_BYTES = 64 * 1024  # a pasted lesson, as JSON

# The pages a step may open: the explorer, Deep zoom, images, the glossary, every lab topic, and a
# corpus's pages: one head's (/head/<model>/<layer>/<head>) and every head's (/heads/<model>).
PAGES = ("/", "/zoom", "/image", "/glossary", "/lab", *(f"/lab/{slug}" for slug in LAB_TOPICS))
MODEL_PATH = r"[A-Za-z0-9][A-Za-z0-9._-]*(?:/[A-Za-z0-9][A-Za-z0-9._-]*)?"
CORPUS_PAGES = (
    re.compile(rf"^/head/{MODEL_PATH}/\d{{1,4}}/\d{{1,4}}$"),
    re.compile(rf"^/heads/{MODEL_PATH}$"),
)
CORPUS_PAGE_FORMS = ("/head/<model>/<layer>/<head>", "/heads/<model>")
LESSON_ID = r"^[a-z0-9][a-z0-9-]{0,63}$"


def is_lesson_page(path: str) -> bool:
    """Whether a step may open `path` (a link's path, no query or fragment)."""
    return path in PAGES or any(form.match(path) for form in CORPUS_PAGES)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class KeyQuestion(Strict):
    """ "Which token will this query attend to most?": the learner clicks a cell of the map in
    `map` (a CSS selector of a Plotly heatmap on the page) in the row `query`; the answer is the
    key with the largest value of that row as drawn (the weights, whatever the colours)."""

    kind: Literal["key"]
    ask: str = Field(min_length=1, max_length=500)
    map: str = Field("#heatmap", pattern=r"^#[a-z][a-z0-9-]{0,63}$")
    query: int = Field(ge=0, le=8191, description="the row (query position) asked about")


class HeadQuestion(Strict):
    """ "Which head does this?": the learner opens a head (a click in All heads, Head roles or
    any map of heads); right when the head's `statistic` on the page's text is at least
    `at_least`, or is the largest of every head's."""

    kind: Literal["head"]
    ask: str = Field(min_length=1, max_length=500)
    statistic: str = Field(pattern=r"^[a-z_]{1,32}$")
    at_least: float | None = Field(None, ge=0, le=1)


Question = Annotated[KeyQuestion | HeadQuestion, Field(discriminator="kind")]


class Step(Strict):
    page: str = Field(
        min_length=1,
        max_length=8_192,
        description="a link to a page of this server: path, query and fragment (the explorer's "
        f"'/?model=...&view=...'); the path one of {list(PAGES)}, or a corpus's page: "
        f"{' or '.join(CORPUS_PAGE_FORMS)}",
    )
    caption: str = Field(min_length=1, max_length=MAX_CAPTION_CHARS)
    question: Question | None = None

    @field_validator("page")
    @classmethod
    def _a_page_of_atlas(cls, page: str) -> str:
        path = re.split(r"[?#]", page, maxsplit=1)[0]
        if not is_lesson_page(path):
            forms = [f for f in CORPUS_PAGE_FORMS if path.startswith(f.split("<")[0])]
            nearest = forms or close_matches(path, (*PAGES, *CORPUS_PAGE_FORMS), n=1, cutoff=0)
            raise ValueError(
                f"{path!r} is not a page a step can open; the closest is {nearest[0]!r}"
            )
        return page


class Lesson(Strict):
    id: str = Field(pattern=LESSON_ID)
    title: str = Field(min_length=1, max_length=120)
    summary: str = Field(min_length=1, max_length=500)
    steps: list[Step] = Field(min_length=1, max_length=MAX_STEPS)


class LessonSummary(BaseModel):
    id: str
    title: str
    summary: str
    steps: int
    source: Literal["shipped", "served"] = Field(
        description="shipped with Atlas, or served from the operator's ATLAS_LESSONS_DIR"
    )


class LessonList(BaseModel):
    lessons: list[LessonSummary]

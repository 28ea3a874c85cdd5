"""Lessons (issue 37, point 6): the shipped ones are valid and open real pages, an operator's
folder adds more, and a lesson written by hand is checked with a message that says what is
wrong."""

import itertools
import json

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from atlas_engine.services.lessons import SHIPPED
from tests.conftest import make_settings

SHIPPED_IDS = [
    "attention-basics",
    "why-sqrt-d",
    "find-the-induction-head",
    "watch-it-learn",
    "attention-on-images",
]


def test_five_lessons_ship_in_course_order(client):
    listed = client.get("/api/lessons").json()["lessons"]
    assert [lesson["id"] for lesson in listed] == SHIPPED_IDS
    assert all(lesson["source"] == "shipped" and lesson["steps"] >= 4 for lesson in listed)


@pytest.mark.parametrize("lesson_id", SHIPPED_IDS)
def test_every_step_of_a_shipped_lesson_opens_a_page_and_some_ask_questions(client, lesson_id):
    lesson = client.get(f"/api/lessons/{lesson_id}").json()
    for step in lesson["steps"]:
        assert client.get(step["page"].split("#")[0]).status_code == 200, step["page"]
    assert any(step.get("question") for step in lesson["steps"])
    assert client.get(f"/learn/{lesson_id}").status_code == 200


def test_an_unknown_lesson_is_a_404_that_lists_the_lessons(client):
    answer = client.get("/api/lessons/no-such-lesson")
    assert answer.status_code == 404
    assert answer.json()["code"] == "not_found"
    assert "attention-basics" in answer.json()["detail"]
    assert client.get("/learn/no-such-lesson").status_code == 404


BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("/learn/no-such-lesson", "no lesson <code>no-such-lesson</code>"),
        ("/learn/Not_An_Id", "no lesson <code>Not_An_Id</code>"),
        ("/lab/nope", "no page at <code>/lab/nope</code>"),
    ],
)
def test_a_browser_asking_for_a_page_that_is_not_there_gets_a_page_saying_so(client, path, says):
    answer = client.get(path, headers=BROWSER)
    assert answer.status_code == 404
    assert answer.headers["content-type"].startswith("text/html")
    assert says in answer.text
    for way_in in ('href="/learn"', 'href="/lab"', 'href="/"'):
        assert way_in in answer.text
    if path.startswith("/learn/"):
        assert 'href="/learn/why-sqrt-d"' in answer.text  # the lessons there are
    assert client.get(path).json()["code"] == "not_found"  # no HTML asked for: JSON


def test_the_api_answers_json_404s_even_to_a_browser(client):
    for path in ("/api/lessons/no-such-lesson", "/api/nope"):
        answer = client.get(path, headers=BROWSER)
        assert answer.status_code == 404
        assert answer.json()["code"] == "not_found"


def test_key_questions_name_their_row_by_token_and_position_as_the_page_shows_it(client):
    for lesson_id in SHIPPED_IDS:
        for step in client.get(f"/api/lessons/{lesson_id}").json()["steps"]:
            question = step.get("question") or {}
            if question.get("kind") == "key":
                assert f"(position {question['query']})" in question["ask"], question
                assert "‘ " not in question["ask"], question  # a leading space shows as ␣


def test_a_last_caption_that_promises_the_next_lesson_names_the_one_that_follows(client):
    listed = client.get("/api/lessons").json()["lessons"]
    promised = 0
    for this, following in itertools.pairwise(listed):
        last = client.get(f"/api/lessons/{this['id']}").json()["steps"][-1]["caption"]
        if "next lesson" in last.lower():
            promised += 1
            assert following["title"] in last, last  # Finish links to it (lesson-page.js)
    assert promised  # Attention basics promises Why √d


def lesson(**changes):
    base = {
        "id": "mine",
        "title": "Mine",
        "summary": "A lesson written by hand.",
        "steps": [{"page": "/?view=grid", "caption": "Look."}],
    }
    return {**base, **changes}


def check(client, body, status=200):
    answer = client.post("/api/lessons/check", json={"text": json.dumps(body)})
    assert answer.status_code == status, answer.text
    return answer.json()


def test_a_pasted_lesson_is_checked_and_given_back_as_the_player_reads_it(client):
    question = {"kind": "key", "ask": "Which?", "query": 3}
    checked = check(client, lesson(steps=[{"page": "/", "caption": "c", "question": question}]))
    assert checked["steps"][0]["question"] == {**question, "map": "#heatmap"}


HEAD_QUESTION_TYPO = {"kind": "head", "ask": "?", "statistic": "self", "atleast": 1}


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (
            lesson(steps=[{"page": "https://example.com/", "caption": "c"}]),
            "step 1's page: 'https://example.com/' is not a page a step can open; the closest is",
        ),
        (
            lesson(steps=[{"page": "/lab/scalng", "caption": "c"}]),
            "step 1's page: '/lab/scalng' is not a page a step can open; the closest is "
            "'/lab/scaling'",
        ),
        (lesson(steps=[]), "steps is too short: at least 1"),
        (lesson(id="Has Spaces"), "id: 'Has Spaces' does not have the form"),
        (
            lesson(steps=[{"page": "/", "caption": "c", "question": {"kind": "keys"}}]),
            "step 1's question: 'keys' is not a kind of question; the closest is 'key'",
        ),
        (
            lesson(steps=[{"page": "/", "caption": "c", "captoin": 1}]),
            "step 1's captoin is not a field of a step; the closest is 'caption'",
        ),
        (
            lesson(steps=[{"page": "/", "caption": "c", "question": HEAD_QUESTION_TYPO}]),
            "step 1's question's atleast is not a field of a head question; the closest is "
            "'at_least'",
        ),
    ],
)
def test_a_broken_lesson_is_refused_in_our_words_with_the_closest_value(client, body, says):
    """Issue 49.3: the field in a teacher's words and the nearest allowed value, never
    pydantic's "Value error," nor every allowed value listed."""
    detail = check(client, body, 422)["detail"]
    assert detail.startswith(says)
    assert "Value error" not in detail and "/lab/masks" not in detail  # no list of every page


def test_a_step_may_open_a_heads_page_and_the_scatter(client):
    steps = [
        {"page": "/head/HuggingFaceTB/SmolLM2-135M-Instruct/17/5?metric=induction", "caption": "c"},
        {"page": "/heads/sentence-transformers/all-MiniLM-L6-v2?x=previous", "caption": "c"},
    ]
    assert len(check(client, lesson(steps=steps))["steps"]) == 2
    bad = check(client, lesson(steps=[{"page": "/head/m/one/2", "caption": "c"}]), 422)
    assert "the closest is '/head/<model>/<layer>/<head>'" in bad["detail"]


def test_text_that_is_not_json_is_refused_with_its_line_and_column(client):
    answer = client.post("/api/lessons/check", json={"text": '{"id": "x",\n  oops}'})
    assert answer.status_code == 422
    assert "line 2" in answer.json()["detail"]


def test_an_operators_folder_adds_lessons_and_cannot_replace_a_shipped_one(
    local_checkpoints, tmp_path
):
    (tmp_path / "mine.json").write_text(json.dumps(lesson()))
    taken = lesson(id="attention-basics", title="Not the real one")
    (tmp_path / "taken.json").write_text(json.dumps(taken))
    (tmp_path / "broken.json").write_text("{")
    settings = make_settings(local_checkpoints).model_copy(update={"lessons_dir": str(tmp_path)})
    with TestClient(create_app(settings)) as other:
        listed = {x["id"]: x for x in other.get("/api/lessons").json()["lessons"]}
        assert listed["mine"]["source"] == "served"
        assert listed["attention-basics"]["title"] == "Attention basics"
        assert len(listed) == len(SHIPPED_IDS) + 1
        assert other.get("/learn/mine").status_code == 200


def test_the_shipped_files_are_what_the_api_serves():
    files = sorted(SHIPPED.glob("*.json"))
    assert [json.loads(path.read_text())["id"] for path in files] == SHIPPED_IDS


def test_why_sqrt_d_states_what_its_variance_rests_on(client):
    """Issue 49.9: var(q·k) = d only for components of mean 0 and variance 1: say both."""
    steps = client.get("/api/lessons/why-sqrt-d").json()["steps"]
    assert "with mean 0 and variance 1" in steps[1]["caption"]
    assert "with mean 0 and variance 1" in client.get("/lab/scaling").text

"""The Ablation tab (an intervention): heads named in the URL are switched off, the answer is
drawn and tabled, the open head can be added, and the export says it is an intervention.
(Named to sort after test_explorer.py, which must see SmolLM2 load.)"""

import json
from urllib.parse import urlencode

import pytest

from tests.e2e.helpers import wait_js

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
TEXT = "One, two, three, four, five, six, seven"


def test_a_shared_ablation_link_redraws_it_and_the_open_head_can_be_added(page, live_server):
    query = {
        "model": SMOLLM2,
        "text": TEXT,
        "layer": 5,
        "head": 2,
        "view": "ablation",
        "off": "3.0,3.4",
    }
    page.goto(f"{live_server}/?{urlencode(query)}")
    wait_js(page, "document.querySelector('#ablation-after').data?.length > 0", 120)
    assert page.input_value("#ablation-heads") == "3.0,3.4"
    assert "3.0, 3.4" in page.text_content("#ablation-summary")
    rows = page.locator("#ablation-table tbody tr")
    assert rows.count() == page.locator("#tokens .token").count()  # every position predicted
    # The token the text really has next stands beside the guesses, and a right guess is marked.
    assert page.locator("#ablation-table thead th").nth(2).inner_text() == "next in the text"
    cells = [rows.nth(i).locator("td") for i in range(rows.count())]
    tokens = page.locator("#tokens .token").all_inner_texts()
    assert [c.nth(2).inner_text() for c in cells] == [*tokens[1:], "—"]
    right = [c for c in cells if c.nth(3).inner_text().split(" ")[0] == c.nth(2).inner_text()]
    assert right and all(c.nth(3).inner_text().endswith("✓") for c in right)
    change = page.evaluate("document.querySelector('#ablation-change').data[0].z")
    assert all(v == 0 for row in change[:4] for v in row)  # up to layer 3: nothing moves
    assert max(max(row) for row in change[4:]) > 0
    with page.expect_download() as info:
        page.click("[data-export='json']")
    with open(info.value.path(), "rb") as saved:
        data = json.loads(saved.read())
    assert "intervention" in data["what"] and data["ablated"] == [
        {"layer": 3, "head": 0}, {"layer": 3, "head": 4},
    ]  # fmt: skip
    page.click("#ablation-add")
    wait_js(page, "new URL(location).searchParams.get('off') === '3.0, 3.4, 5.2'", 30)
    wait_js(page, "document.querySelector('#ablation-summary').textContent.includes('5.2')", 120)

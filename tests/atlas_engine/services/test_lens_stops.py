"""Issue 50.8: the logit lens stops between two blocks of its rows once its client has gone
(it ran to its end, 9.8 CPU-s after a client left)."""

import pytest

from atlas_engine.errors import RequestCancelled
from atlas_engine.models.registry import SMOLLM2_ID
from atlas_engine.schemas.writes import LensRequest
from atlas_engine.services.lens import lens_fields, plan_lens

TEXT = "The Eiffel Tower is in the city of Paris, and the Colosseum is in the city of Rome. " * 2


def test_the_lens_stops_between_blocks_once_its_client_has_gone(app):
    loaded = app.state.manager.get(SMOLLM2_ID)
    plan = plan_lens(loaded, LensRequest(model=SMOLLM2_ID, text=TEXT, top_k=3))
    asked = []

    def gone() -> bool:  # the client leaves once the pass is taken apart
        asked.append(True)
        return len(asked) > 1

    with pytest.raises(RequestCancelled, match="the lens's rows"):
        lens_fields(loaded, plan, 3, gone)
    assert len(asked) == 2  # after the pass, then between the first two blocks


def test_a_lens_whose_client_stays_asks_between_every_block(app):
    loaded = app.state.manager.get(SMOLLM2_ID)
    plan = plan_lens(loaded, LensRequest(model=SMOLLM2_ID, text=TEXT, top_k=3))
    asked = []
    fields = lens_fields(loaded, plan, 3, lambda: asked.append(True) and False)
    rows = (loaded.arch.num_layers + 1) * len(plan.positions)  # 31 × 40 through the head
    assert len(fields["top"]) == loaded.arch.num_layers + 1
    assert len(asked) == 1 + (rows - 1) // 128  # after the pass, then between 128-row blocks

"""The logit lens's stated bound on every row, not only the last: SmolLM2 on CJK text and emoji,
prose, code and repeated text, each row's probabilities against the exact softmax of that row's
logits through the model's own final norm and head."""

from __future__ import annotations

import pytest
import torch

from atlas_engine.inference.forward import tokenize
from atlas_engine.inference.lens import LENS_MAX_ABS_DIFF, logit_lens
from atlas_engine.inference.residual import layout_of, run_stream
from atlas_engine.models.lm_head import head_logits
from atlas_engine.models.registry import SMOLLM2_ID
from atlas_engine.schemas.writes import LensResponse
from tests.support.live import REPO
from tests.support.smollm2_texts import prose_texts

pytestmark = pytest.mark.slow

CHOSEN = 7


def texts() -> dict[str, str]:
    code = (REPO / "atlas_engine" / "inference" / "lens.py").read_text()[:2500]
    return {
        "cjk": "東京は日本の首都です。🍣🍜 北京是中国的首都。🐼 서울은 한국의 수도입니다 🇰🇷",
        "prose": prose_texts(300)[0],
        "code": code,
        "repeated": " the cat sat on the mat." * 30,
    }


@pytest.fixture(scope="module")
def smollm2(client, app):
    return app.state.manager.get(SMOLLM2_ID)


@pytest.mark.parametrize("kind", ["cjk", "prose", "code", "repeated"])
def test_every_rows_probabilities_are_within_the_stated_bound(smollm2, kind):
    inputs, _ = tokenize(smollm2, texts()[kind], None)
    seq = inputs["input_ids"].shape[1]
    stream = run_stream(smollm2, inputs)
    grid = logit_lens(smollm2, stream, list(range(seq)), 5, chosen=CHOSEN)
    norm = layout_of(smollm2).final_norm
    rows = [x[0] for x in (stream.inputs[0], *stream.outputs)]  # each (seq, d_model)
    assert grid.probs.shape == (len(rows), seq, 5)
    worst = 0.0
    for row, hidden in enumerate(rows):
        with torch.inference_mode():
            exact = head_logits(smollm2.predictor, norm(hidden)).double().log_softmax(-1)
        assert torch.equal(grid.ids[row], exact.topk(5).indices)
        shown = torch.cat([grid.probs[row], grid.chosen_prob[row][:, None]], 1).double()
        wanted = torch.cat([exact.gather(1, grid.ids[row]), exact[:, CHOSEN : CHOSEN + 1]], 1)
        worst = max(worst, float((shown - wanted.exp()).abs().max()))
    assert worst <= LENS_MAX_ABS_DIFF


def test_the_api_states_the_bound():
    assert f"within {LENS_MAX_ABS_DIFF:.0e}".replace("e-0", "e-") in (
        LensResponse.model_fields["top"].description
    )

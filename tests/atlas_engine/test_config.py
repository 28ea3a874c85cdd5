"""Settings read from ATLAS_* variables, and values that would be unsafe refused at start-up."""

import pytest
from pydantic import ValidationError

from atlas_engine.config import Settings


def test_the_heavy_lanes_nice_and_the_shutdown_grace_are_read_from_the_environment(monkeypatch):
    assert (Settings().heavy_lane_nice, Settings().shutdown_grace_seconds) == (10, 20.0)
    monkeypatch.setenv("ATLAS_HEAVY_LANE_NICE", "0")  # a host whose cores others share
    monkeypatch.setenv("ATLAS_SHUTDOWN_GRACE_SECONDS", "5")
    assert (Settings().heavy_lane_nice, Settings().shutdown_grace_seconds) == (0, 5.0)


@pytest.mark.parametrize(
    "variable,value",
    [
        ("ATLAS_HEAVY_LANE_NICE", "-1"),  # above the server: needs privilege, and starves it
        ("ATLAS_HEAVY_LANE_NICE", "20"),  # Linux's lowest priority is 19
        ("ATLAS_SHUTDOWN_GRACE_SECONDS", "0"),
    ],
)
def test_values_out_of_range_refuse_to_start(monkeypatch, variable, value):
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError, match=variable.removeprefix("ATLAS_").lower()):
        Settings()

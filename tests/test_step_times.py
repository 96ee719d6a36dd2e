"""StepTimes sums wall-clock time per section, including time spent in a section that raised."""

import time

import pytest

from sagespec.common.step_times import SECTIONS, StepTimes


def test_sections_accumulate_and_report_every_known_section():
    times = StepTimes()
    with times("drafting"):
        time.sleep(0.01)
    with times("drafting"):
        time.sleep(0.01)
    with times("verification"):
        time.sleep(0.02)
    times.steps += 2
    times.tree_steps += 1
    totals = times.totals()
    assert set(SECTIONS) <= set(totals)
    assert 0.02 <= totals["drafting"] < 0.5
    assert 0.02 <= totals["verification"] < 0.5
    assert totals["tree_attention"] == 0.0 and totals["steps"] == 2 and totals["tree_steps"] == 1


def test_a_section_that_raises_still_counts():
    times = StepTimes()
    with pytest.raises(RuntimeError), times("tree_attention"):
        time.sleep(0.01)
        raise RuntimeError("boom")
    assert times.totals()["tree_attention"] >= 0.01

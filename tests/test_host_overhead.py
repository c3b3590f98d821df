"""The host-overhead benchmark (hf_specdec/bench/host_overhead.py) at its smallest: every method runs, the per-step
figures are counted from the right forwards, and host ms are finite and positive. No timing is asserted."""

from __future__ import annotations

import math

import pytest
import torch

from hf_specdec.bench.host_overhead import (
    METHODS,
    ForwardClock,
    HostOverheadConfig,
    markdown,
    run_host_overhead,
    tiny_models,
)

SMALLEST = HostOverheadConfig(context_lengths=(8, 24), new_tokens=24, repeats=1, batch_size=2)


@pytest.fixture(scope="module")
def report():
    return run_host_overhead(SMALLEST)


def test_every_method_and_context_reports_finite_positive_host_ms(report):
    cells = {(r["method"], r["context"]) for r in report["results"]}
    assert cells == {(m, c) for m in METHODS for c in SMALLEST.context_lengths}
    for r in report["results"]:
        assert r["steps_timed"] >= 1, r
        for key in ("host_ms_median", "host_ms_mean", "host_ms_p10", "host_ms_p90", "call_host_ms"):
            assert math.isfinite(r[key]) and r[key] > 0, (key, r)
        assert r["target_ms_per_step"] > 0 and r["call_ms"] > r["call_host_ms"]
        assert r["new_tokens"] == SMALLEST.new_tokens  # no EOS in the tiny target: every call runs to the end
        assert r["rows"] == (2 if METHODS[r["method"]][1] > 1 else 1)
        drafts = r["method"] not in ("plain", "plain-batch", "prompt-lookup")
        assert (r["drafter_ms_per_step"] > 0) == drafts or r["method"] == "tree-auto", r  # auto may skip drafting
    assert set(report["context_growth"]) == set(METHODS)
    assert report["environment"]["machine"]["torch_threads"] == SMALLEST.threads


def test_markdown_names_the_machine_and_every_method(report):
    text = markdown(report)
    assert report["environment"]["machine"]["cpu"] in text and "load average" in text
    for method in METHODS:
        assert f"| {method} |" in text
    assert "host ms/step @8 (p10)" in text and "host ms/step @24 (p10)" in text


def test_steps_are_the_intervals_between_target_forwards():
    """Plain greedy: one target forward per token, so N new tokens give N forwards and N - 2 timed steps (the
    prefill's interval and the last are left out); a step holds exactly one target forward."""
    models = tiny_models(SMALLEST)
    ids = torch.randint(3, 100, (1, 8))
    with ForwardClock(models.target, [models.drafter]) as clock:
        models.target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=7, do_sample=False)
    assert sum(1 for *_, is_target in clock.events if is_target) == 7
    steps = clock.steps()
    assert len(steps) == 5
    assert all(s["target"] > 0 and s["drafter"] == 0 and s["host"] > 0 for s in steps)


def test_config_refuses_what_cannot_be_measured():
    with pytest.raises(ValueError, match="unknown methods"):
        HostOverheadConfig(methods=("tree", "nope"))
    with pytest.raises(ValueError, match="new_tokens"):
        HostOverheadConfig(new_tokens=2)

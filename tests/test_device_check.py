"""The GPU machine's one prepared check (scripts/device_check.sh) runs here in its small CPU form, so it cannot rot:
a device-parametrised test, then the synthetic step benchmark whose forced drafters commit exactly the tau asked for.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from hf_specdec.bench.device_step import SHAPES, grid

ROOT = Path(__file__).resolve().parents[1]


def test_device_check_runs_small_on_the_cpu(tmp_path):
    out = tmp_path / "device_step.json"
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    done = subprocess.run(
        ["bash", "scripts/device_check.sh", "--device", "cpu", "--small", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    log = done.stdout + done.stderr
    assert done.returncode == 0, log
    assert " passed" in done.stdout and "| model | attn | batch |" in done.stdout
    result = json.loads(out.read_text())
    rows, plain = result["rows"], {r["batch"]: r for r in result["rows"] if r["method"] == "plain"}
    assert {r["method"] for r in rows} == {"plain", "chain", "tree"} and set(plain) == {1, 2}
    assert result["device"] == "cpu" and not result["left_out_by_deadline"] and not result["failed"]
    for r in rows:
        assert r["step_ms"] > 0 and r["tokens_per_s"] > 0
        if r["method"] != "plain":  # the forced target and drafter commit exactly tau tokens per row and step
            assert r["measured_tau"] == r["tau"], r
            assert r["speedup"] == r["tokens_per_s"] / plain[r["batch"]]["tokens_per_s"]


def test_the_full_grid_covers_what_the_gpu_run_is_for():
    cases = grid(["qwen2.5-1.5b", "qwen3-8b"], small=False, flex=True)
    assert len(set(cases)) == len(cases)
    speculative = [c for c in cases if c.method != "plain"]
    assert {c.tau for c in speculative} == set(range(1, 9)) and {c.block for c in speculative} == {8, 16}
    assert {c.budget for c in cases if c.method == "tree"} == {8, 16, 32}
    assert {c.batch for c in cases} == {1, 8, 32} and {c.attn for c in cases} == {"sdpa", "flex_attention"}
    assert all(c.batch == 1 for c in cases if c.attn == "flex_attention")  # batched steps need a per-row mask
    for model in ("qwen2.5-1.5b", "qwen3-8b"):  # every timed case has its plain baseline
        mine = [c for c in cases if c.model == model]
        baselines = {(c.attn, c.batch) for c in mine if c.method == "plain"}
        assert {(c.attn, c.batch) for c in mine} == baselines
    assert SHAPES["qwen3-8b"]["hidden_size"] == 4096 and SHAPES["qwen2.5-1.5b"]["tie_word_embeddings"]

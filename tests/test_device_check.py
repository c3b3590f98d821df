"""The GPU machine's one prepared check (scripts/device_check.sh) runs here in its small CPU form, so it cannot rot:
a device-parametrised test, then the synthetic step benchmark whose forced drafters (block, PARD, PARD-2) commit
exactly the tau asked for, and whose greedy agreement checks give plain decoding's output.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import torch

from hf_specdec.bench.device_step import PARD_LM, SHAPES, forced_target, grid, pard_drafter, random_model

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
    assert " passed" in done.stdout and "| model | drafter | attn | batch |" in done.stdout
    assert "| model | drafter | decoding | forced tau |" in done.stdout
    result = json.loads(out.read_text())
    rows, plain = result["rows"], {r["batch"]: r for r in result["rows"] if r["method"] == "plain"}
    assert {r["method"] for r in rows} == {"plain", "chain", "tree"} and set(plain) == {1, 2}
    assert result["device"] == "cpu" and not result["left_out_by_deadline"] and not result["failed"]
    timed = {(r["drafter"], r["batch"]) for r in rows if r["method"] != "plain"}
    assert {("block", 1), ("block", 2), ("pard", 1), ("pard2", 1), ("pard2", 2)} <= timed
    for r in rows:
        assert r["step_ms"] > 0 and r["tokens_per_s"] > 0
        if r["method"] != "plain":  # the forced target and drafter commit exactly tau tokens per row and step
            assert r["measured_tau"] == r["tau"], r
            assert r["speedup"] == r["tokens_per_s"] / plain[r["batch"]]["tokens_per_s"]
            assert r["draft_model"] == ("tiny-lm" if r["drafter"] != "block" else "")
    agreement = result["agreement"]  # real and forced drafters, chains and trees: plain greedy's tokens
    assert {(r["drafter"], r["budget"] > 0, r["tau"] > 0) for r in agreement} >= {
        ("pard", False, False),
        ("pard2", False, False),
        ("pard2", True, False),
        ("pard", False, True),
        ("pard2", True, True),
    }
    assert not result["disagreed"]
    for r in agreement:
        assert r["identical"] and r["equal_share"] == 1.0 and r["new_tokens"] == result["agree_new_tokens"], r


def test_the_full_grid_covers_what_the_gpu_run_is_for():
    cases = grid(["qwen2.5-1.5b", "qwen3-8b"], small=False, flex=True)
    assert len(set(cases)) == len(cases)
    speculative = [c for c in cases if c.method in ("chain", "tree")]
    assert {c.tau for c in speculative} == set(range(1, 9)) and {c.block for c in speculative} == {8, 16}
    assert {c.budget for c in cases if c.method == "tree"} == {8, 16, 32}
    assert {c.batch for c in cases} == {1, 8, 32} and {c.attn for c in cases} == {"sdpa", "flex_attention"}
    assert all(c.batch == 1 for c in cases if c.attn == "flex_attention")  # batched steps need a per-row mask
    for model in ("qwen2.5-1.5b", "qwen3-8b"):  # every timed case has its plain baseline
        mine = [c for c in cases if c.model == model]
        baselines = {(c.attn, c.batch) for c in mine if c.method == "plain"}
        assert {(c.attn, c.batch) for c in mine} == baselines
        for kind in ("pard", "pard2"):  # PARD and PARD-2 chains: block 8, tau 1..8 at batch 1, a few at batch 8
            chains = [c for c in mine if c.drafter == kind and c.method == "chain"]
            assert {c.tau for c in chains if c.batch == 1} == set(range(1, 9)) and {c.block for c in chains} == {8}
            assert {c.batch for c in chains} == {1, 8}
        agree = [c for c in mine if c.method == "agree"]  # real (tau 0) and forced drafters, chain and tree
        assert {(c.drafter, c.tau > 0) for c in agree} >= {("pard", False), ("pard2", False), ("pard2", True)}
        assert {c.budget > 0 for c in agree} == {False, True} and all(c.batch == 1 for c in agree)
    first_tree = next(i for i, c in enumerate(cases) if c.method == "tree")
    early = set(cases[:first_tree])  # the deadline cuts trees before the agreement and PARD chains
    assert all(c in early for c in cases if c.method == "agree" or (c.drafter != "block" and c.batch == 1))
    assert SHAPES["qwen3-8b"]["hidden_size"] == 4096 and SHAPES["qwen2.5-1.5b"]["tie_word_embeddings"]


def test_the_pard_drafters_have_the_real_shapes_of_their_targets_family():
    """Qwen2.5-0.5B drafts for Qwen2.5-1.5B, Qwen3-0.6B for Qwen3-8B: same family and vocabulary, the real sizes
    (built on the meta device: shapes only), PARD-2 reading AMD's four taps of the target."""
    assert PARD_LM["qwen2.5-1.5b"] == "qwen2.5-0.5b" and PARD_LM["qwen3-8b"] == "qwen3-0.6b"
    meta = torch.device("meta")
    for name, millions in (("qwen2.5-1.5b", 494), ("qwen3-8b", 596)):
        target = forced_target(name, "sdpa", meta, torch.bfloat16)
        lm = random_model(PARD_LM[name], meta, torch.bfloat16)
        assert lm.config.model_type == target.config.model_type and lm.config.vocab_size == target.config.vocab_size
        assert round(sum(p.numel() for p in lm.parameters()) / 1e6) == millions
        pard = pard_drafter(target, lm, "pard", 8, forced=True)
        pard2 = pard_drafter(target, lm, "pard2", 8, forced=False)
        assert pard.feature_proj is None and pard2.config.target_layer_ids == [-1, -8, -16, -24]
        assert pard2.feature_proj.in_features == 4 * target.config.hidden_size
        assert pard.lm is lm and pard2.lm is lm and pard.config.mask_token_id < lm.config.vocab_size

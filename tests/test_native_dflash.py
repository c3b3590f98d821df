"""transformers' own DFlash path (`generate(..., speculation_type="dflash")`) with a block drafter's weights, as the
benchmark's `native-dflash` method: lossless greedy output, the same drafts as hf_specdec's chain, clear refusals."""

from __future__ import annotations

import pytest
import torch
from conftest import fed_ids, make_drafter, tiny_target

from hf_specdec import DCOCODrafter, DecodingSettings
from hf_specdec.bench.cases import Case
from hf_specdec.bench.methods import Models, Settings, build_methods
from hf_specdec.bench.native_dflash import native_dflash_assistant, native_dflash_refusal
from hf_specdec.bench.passes import run_benchmark

NEW_TOKENS = 24


def varied(drafter):
    """Large random weights: a fresh drafter (init std 0.02) drafts nearly one token everywhere."""
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in drafter.parameters():
            if p.dim() == 2:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
    return drafter


def test_native_greedy_equals_plain_and_drafts_what_our_chain_drafts(target, prompt):
    drafter = varied(make_drafter(target, 6))
    drafter.decoding = DecodingSettings(budget="fixed")  # the argmax chain, every step (transformers' loop)
    assistant = native_dflash_assistant(drafter, target)
    assert type(assistant).__name__ == "MuseGlimmerAssistantModel"
    plain = target.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False)
    native, native_fed = fed_ids(target, prompt, assistant_model=assistant, speculation_type="dflash")
    ours, ours_fed = fed_ids(target, prompt, assistant_model=drafter)
    assert torch.equal(native, plain) and torch.equal(ours, plain)
    # the same weights draft the same tokens: every verification feeds the target the same ids (anchor + 5 drafts),
    # up to the last few, where the two loops shorten the block to what max_length leaves at different points
    full = [ids for ids in ours_fed if len(ids) == 6]
    assert len(full) >= 3 and native_fed[: len(full)] == full
    assert len({tuple(ids[1:]) for ids in full}) > 1  # the drafts vary: an informative comparison


def test_conversion_keeps_dtype_weights_and_float32_positions(target):
    drafter = make_drafter(target, 4).to(torch.bfloat16)
    assistant = native_dflash_assistant(drafter, target)
    assert assistant.dtype == torch.bfloat16 and assistant.rotary_emb.inv_freq.dtype == torch.float32
    theirs = assistant.state_dict()
    assert torch.equal(theirs["encoder.fc.weight"], drafter.fc.weight)
    assert torch.equal(theirs["encoder.output_norm_enc.weight"], drafter.hidden_norm.weight)
    assert torch.equal(theirs["layers.0.mlp.down_proj.weight"], drafter.state_dict()["layers.0.mlp.down_proj.weight"])
    assert assistant.config.target_layer_ids == drafter.config.target_layer_ids
    assert (assistant.config.block_size, assistant.config.mask_token_id) == (4, drafter.config.mask_token_id)


def test_drafters_that_cannot_run_natively_say_why():
    target = tiny_target("llama")
    dcoco = DCOCODrafter.from_block_drafter(make_drafter(target, 4)).eval()
    assert "more than the DFlash backbone" in native_dflash_refusal(dcoco)
    biased = make_drafter(target, 4, attention_bias=True)
    assert "biased" in native_dflash_refusal(biased)
    assert native_dflash_refusal(make_drafter(target, 4)) is None
    models = Models(target, None, {"dcoco": dcoco, "block": make_drafter(target, 4)})
    with pytest.raises(ValueError, match="'dcoco' cannot run through transformers' DFlash path"):
        build_methods(models, Settings(prompt_lookup=0, native_dflash=("dcoco",)))
    with pytest.raises(ValueError, match="not drafters of this run"):
        build_methods(models, Settings(prompt_lookup=0, native_dflash=("nope",)))
    every = build_methods(models, Settings(prompt_lookup=0, native_dflash=()))  # () = every one that can
    assert [(m.label, m.kind) for m in every][-1] == ("native-dflash", "native_dflash")
    assert [m.settings.get("weights_of") for m in every if m.kind == "native_dflash"] == ["block"]


def test_benchmark_times_native_dflash_next_to_the_chain():
    """One run times plain, hf_specdec's chain and the native path; the native path's per-forward commits (tau from
    the forward hook) equal the chain's: same weights, same drafts, same acceptance (fp32)."""

    def models(dtype_name):
        target = tiny_target("llama", seed=0).to(getattr(torch, dtype_name))
        chain = make_drafter(target, 4)
        chain.decoding = DecodingSettings(budget="fixed")
        return Models(target, None, {"chain": chain})

    g = torch.Generator().manual_seed(7)
    ids = torch.randint(3, 250, (1, 10), generator=g)
    cases = [Case("code/0", "code", torch.cat([ids, ids[:, :6]], dim=1))]
    settings = Settings(
        dtype="float32", max_new_tokens=12, prompt_lookup=0, identity_dtype="float32", native_dflash=("chain",)
    )
    settings.identity_all_methods = True
    report = run_benchmark(models, cases, settings)
    rows = report["results"]["all"]
    assert list(rows) == ["plain", "chain", "native-dflash"]
    assert rows["native-dflash"]["identical_rate"] == 1.0 and rows["native-dflash"]["agreement_rate"] == 1.0
    assert rows["native-dflash"]["e2e_tok_s"] > 0
    commits = {c["method"]: c["commits"] for c in report["calls"]}
    assert commits["native-dflash"] == commits["chain"]
    assert rows["native-dflash"]["tau_hook"] == pytest.approx(rows["chain"]["tau_hook"])
    described = {m["label"]: m for m in report["methods"]}["native-dflash"]
    assert described["settings"]["weights_of"] == "chain" and described["extra_weights_mib"] > 0

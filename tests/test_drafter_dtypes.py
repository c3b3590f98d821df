"""A drafter loaded as it was saved runs next to its target whatever the two dtypes, for every kind: what training
on CPU saves (bf16) next to a target loaded without `dtype` (fp32), and the reverse, loaded the README's way
(`from_pretrained(path)` / `load_drafter(path)`, no dtype). The drafter keeps its own dtype: the target's features
and embeddings are cast to it where the drafter reads them, its hidden states to the target's where the target's
LM head scores them; the output is the target's own greedy output."""

from __future__ import annotations

import pytest
import torch
from conftest import MASK_ID, make_drafter, tiny_target
from test_pard import tiny_lm

from hf_specdec import (
    BlockDrafter,
    DBLASTDrafter,
    DCOCODrafter,
    DecodingSettings,
    PardDrafter,
    SpeculativeServer,
    load_drafter,
)

KINDS = {
    "block": lambda target: make_drafter(target, 4),
    "dcoco": lambda target: make_drafter(target, 4, cls=DCOCODrafter),
    "dblast": lambda target: DBLASTDrafter.from_block_drafter(make_drafter(target, 4), mixture_rank=8),
    "pard": lambda target: PardDrafter.from_causal_lm(tiny_lm(), target, mask_token_id=MASK_ID, block_size=4),
}
DIRECTIONS = {"bf16 drafter, fp32 target": (torch.bfloat16, torch.float32), "reverse": (torch.float32, torch.bfloat16)}


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("kind", KINDS)
def test_a_drafter_loaded_as_saved_runs_next_to_a_target_of_another_dtype(tmp_path, kind, direction):
    saved, target_dtype = DIRECTIONS[direction]
    target = tiny_target("llama").to(target_dtype)
    KINDS[kind](target).to(saved).save_pretrained(tmp_path / "drafter")
    drafter = load_drafter(tmp_path / "drafter")  # as the README loads it: no dtype given
    assert drafter.dtype == saved
    prompt = torch.randint(3, 200, (1, 12), generator=torch.Generator().manual_seed(0))
    plain = target.generate(prompt, max_new_tokens=12, do_sample=False)
    out = target.generate(prompt, max_new_tokens=12, do_sample=False, assistant_model=drafter)
    assert drafter.last_acceptance_stats.verify_forwards > 0 and drafter.dtype == saved
    if target_dtype == torch.float32:  # a bf16 random target may break near-ties differently when verifying blocks
        assert torch.equal(out, plain)
    else:
        assert out.shape == plain.shape


@pytest.mark.parametrize("decoding", [DecodingSettings(budget="fixed", sampled_drafts="argmax"), DecodingSettings()])
def test_a_bf16_block_drafter_folder_with_an_fp32_target_in_every_loop_and_the_server(tmp_path, decoding):
    """The issue's case exactly: `BlockDrafter.from_pretrained(path)` of a bf16 folder, an fp32 target."""
    target = tiny_target("llama")
    make_drafter(target, 4).to(torch.bfloat16).save_pretrained(tmp_path / "drafter")
    drafter = BlockDrafter.from_pretrained(tmp_path / "drafter")
    drafter.decoding = decoding
    prompt = torch.randint(3, 200, (1, 12), generator=torch.Generator().manual_seed(1))
    plain = target.generate(prompt, max_new_tokens=10, do_sample=False)
    assert torch.equal(target.generate(prompt, max_new_tokens=10, do_sample=False, assistant_model=drafter), plain)
    server = SpeculativeServer(target, drafter, max_batch_size=2, do_sample=False)
    request = server.submit(prompt[0], 10)
    server.run()
    assert torch.equal(request.output_ids, plain[0])

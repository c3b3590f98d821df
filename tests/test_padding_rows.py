"""Every row of a batch decodes as plain `generate` decodes it, also a row that is all padding or only its prompt.

Contract: `target.generate(ids, attention_mask=mask, assistant_model=drafter)` equals
`target.generate(ids, attention_mask=mask)` token for token when a row's attention mask is all zero (plain generate
takes that row's first token from its masked ids and numbers its new tokens from 1), when the masked ids are not
the pad id (logits processors see them), and when a row stops at its first token (EOS, max_new_tokens); for chains,
trees, prompt-lookup branches and the adaptive budget, block and PARD drafters, and the server.
"""

from __future__ import annotations

import pytest
import torch
from conftest import assert_batch_and_server_equal_plain, make_drafter, tiny_target
from test_pard import pard
from transformers import GPT2Config, GPT2LMHeadModel

from hf_specdec import DecodingSettings

SETTINGS = {
    "chain": DecodingSettings(budget="fixed"),
    "tree": DecodingSettings(budget="fixed", tree_budget=6, tree_topk=2),
    "lookup": DecodingSettings(budget="fixed", prompt_lookup_tokens=3),
    "adaptive": DecodingSettings(),
}
DRAFTERS = {"block": lambda target: make_drafter(target, 4), "pard": pard}


def padded_batch(masked_row: int, width: int = 6, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Two rows of random ids (none the pad id); row `masked_row` has an all-zero attention mask."""
    ids = torch.randint(3, 250, (2, width), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones(2, width, dtype=torch.long)
    mask[masked_row] = 0
    return ids, mask


def assert_equals_plain(target, drafter, ids, mask, **kwargs) -> None:
    plain = target.generate(ids, attention_mask=mask, do_sample=False, **kwargs)
    drafted = target.generate(ids, attention_mask=mask, do_sample=False, assistant_model=drafter, **kwargs)
    assert torch.equal(drafted, plain)


@pytest.mark.parametrize("masked_row", [0, 1])
@pytest.mark.parametrize("settings", list(SETTINGS))
@pytest.mark.parametrize("kind", list(DRAFTERS))
def test_a_row_that_is_all_padding_decodes_as_plain_generate(kind, settings, masked_row):
    target = tiny_target("llama")
    drafter = DRAFTERS[kind](target)
    drafter.decoding = SETTINGS[settings]
    ids, mask = padded_batch(masked_row)
    assert_equals_plain(target, drafter, ids, mask, max_new_tokens=16)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_a_batch_that_is_all_padding_decodes_as_plain_generate(attn):
    target = tiny_target("qwen3", attn=attn)
    drafter = make_drafter(target, 4)
    ids, mask = padded_batch(0)
    for settings in ("chain", "tree"):
        drafter.decoding = SETTINGS[settings]
        assert_equals_plain(target, drafter, ids, mask * 0, max_new_tokens=10)


def tiny_gpt2() -> GPT2LMHeadModel:
    """A target with learned absolute positions: a token numbered one off gives other logits."""
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=256, n_embd=64, n_layer=2, n_head=4, n_positions=128, initializer_range=0.3, pad_token_id=0
    )
    config.bos_token_id, config.eos_token_id = 1, 2
    target = GPT2LMHeadModel(config).eval()
    target.generation_config.pad_token_id = 0
    return target


@pytest.mark.parametrize("settings", ["chain", "tree"])
def test_an_all_padding_row_is_numbered_as_plain_generate_numbers_it(settings):
    target = tiny_gpt2()
    drafter = pard(target)
    drafter.decoding = SETTINGS[settings]
    ids, mask = padded_batch(0)
    assert_equals_plain(target, drafter, ids, mask, max_new_tokens=12)


def test_logits_processors_see_the_masked_ids_plain_generate_holds():
    target = tiny_target("llama")
    drafter = make_drafter(target, 4)
    ids, mask = padded_batch(0)
    mask[0, :3] = 0  # row 0: three masked ids that are not the pad id, then three tokens
    for settings in ("chain", "tree"):
        drafter.decoding = SETTINGS[settings]
        assert_equals_plain(target, drafter, ids, mask, max_new_tokens=12, repetition_penalty=3.0)


@pytest.mark.parametrize("stopping_row", [0, 1])
@pytest.mark.parametrize("settings", ["chain", "tree"])
def test_a_row_that_stops_at_its_first_token_decodes_as_plain_generate(settings, stopping_row):
    """EOS as a row's first token leaves it only its prompt and that token; the other row goes on."""
    target = tiny_target("llama")
    drafter = pard(target)
    drafter.decoding = SETTINGS[settings]
    ids, mask = padded_batch(1)
    mask[1] = 1
    mask[0, :2] = 0
    first = target.generate(ids, attention_mask=mask, max_new_tokens=1, do_sample=False)[:, -1]
    eos = int(first[stopping_row])
    assert_equals_plain(target, drafter, ids, mask, max_new_tokens=12, eos_token_id=eos)
    assert_equals_plain(target, drafter, ids, mask, max_new_tokens=1)
    assert_equals_plain(target, drafter, ids[:1, 2:], mask[:1, 2:], max_new_tokens=12, eos_token_id=int(first[0]))
    assert_equals_plain(target, drafter, ids[:1, 2:], mask[:1, 2:], max_new_tokens=1)


def test_the_server_serves_a_request_that_stops_at_its_first_token():
    target = tiny_target("llama")
    drafter = pard(target)
    ids, _ = padded_batch(0)
    prompts = [ids[0], ids[1, 2:]]
    target.generation_config.eos_token_id = int(target.generate(ids[:1], max_new_tokens=1, do_sample=False)[0, -1])
    for settings in ("chain", "tree"):
        drafter.decoding = SETTINGS[settings]
        assert_batch_and_server_equal_plain(target, drafter, prompts, new_tokens=10)

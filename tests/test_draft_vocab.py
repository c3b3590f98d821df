"""Reduced draft vocabulary (EAGLE-3 style): the drafter scores a subset of ids with the target's LM-head rows;
verification still uses the full vocabulary, so output is unchanged."""

from __future__ import annotations

import pytest
import torch
from conftest import VOCAB, make_drafter, oracle, tiny_target

from hf_specdec import BlockDrafter
from hf_specdec.training.data import TrainingSequence
from hf_specdec.training.sequences import frequent_labels

SUBSET = torch.arange(3, VOCAB, 3)  # every third id


def reduced(target, block_size):
    drafter = make_drafter(target, block_size)
    drafter.set_draft_vocab(SUBSET)
    return drafter


@pytest.mark.parametrize("block_size", [2, 4, 8])
def test_greedy_output_is_unchanged(target, prompt, block_size):
    drafter = reduced(target, block_size)
    ref = target.generate(prompt, do_sample=False, max_new_tokens=30)
    out = target.generate(prompt, do_sample=False, max_new_tokens=30, assistant_model=drafter)
    assert torch.equal(out, ref)


def test_drafts_come_from_the_draft_vocabulary_and_match_full_head_rows(prompt):
    target = tiny_target("llama")
    drafter = reduced(target, 6)
    proposals = []
    original = type(drafter).forward

    def capture(module, args, kwargs, output):
        proposals.append(output.last_hidden_state.detach())

    drafter.register_forward_hook(capture, with_kwargs=True)
    out = target.generate(prompt, do_sample=False, max_new_tokens=20, assistant_model=drafter)
    assert out.shape[1] == prompt.shape[1] + 20 and original is type(drafter).forward
    head = target.get_output_embeddings().weight
    for hidden in proposals:
        full = hidden[0, 1:] @ head.T  # (K-1, V) scores over the whole vocabulary
        best_in_subset = SUBSET[full[:, SUBSET].argmax(-1)]
        masked = full.clone()
        keep = torch.zeros(VOCAB, dtype=torch.bool)
        keep[SUBSET] = True
        masked[:, ~keep] = float("-inf")
        assert torch.equal(masked.argmax(-1), best_in_subset)


def test_draft_vocab_is_saved_and_loaded(tmp_path):
    drafter = reduced(tiny_target("qwen3"), 4)
    drafter.save_pretrained(tmp_path)
    loaded = BlockDrafter.from_pretrained(tmp_path)
    assert loaded.config.draft_vocab_size == len(SUBSET)
    assert torch.equal(loaded.draft_vocab, SUBSET)


def test_oracle_acceptance_is_kept_with_a_reduced_head(target, prompt):
    """Scores over a reduced vocabulary map back to the right token ids on the accept/commit path."""
    drafter = oracle(target, prompt, 5, None, 24, eos_token_id=None)
    drafter.set_draft_vocab(torch.cat([SUBSET, drafter.reference[0]]))  # the continuation is draftable
    ref = target.generate(prompt, do_sample=False, max_new_tokens=24, eos_token_id=None)
    out = target.generate(prompt, do_sample=False, max_new_tokens=24, eos_token_id=None, assistant_model=drafter)
    assert torch.equal(out, ref)
    assert drafter.last_acceptance_stats.accepted[0] == 4


def test_frequent_labels_rank_by_count():
    ids = torch.tensor([5, 5, 5, 7, 7, 9, 1, 1, 1, 1])
    seq = TrainingSequence(ids, torch.zeros(10, 4), loss_start=1)
    assert frequent_labels([seq], 2).tolist() == [1, 5]
    with_argmax = TrainingSequence(ids, torch.zeros(10, 4), loss_start=1, next_tokens=torch.full((10,), 9))
    assert frequent_labels([with_argmax], 1).tolist() == [9]

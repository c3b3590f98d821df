"""DCOCO: the corrector's shape, the walk, lossless greedy decoding in chain and tree modes, save/load, training."""

from __future__ import annotations

import pytest
import torch
from conftest import OracleDCOCODrafter, make_drafter, oracle
from transformers import AutoModel

import hf_specdec
from hf_specdec import BlockDrafter, BlockDrafterConfig, DCOCOConfig, DCOCODrafter, DecodingSettings, head_of
from hf_specdec.models.heads.dcoco.walk import conditional_log_probs, prefix_first_walk, sampled_walks, walk_q
from hf_specdec.training.losses import dcoco_selection_loss

NEW_TOKENS = 29


def dcoco(target, block_size=5, **kwargs):
    """A block drafter with a fresh DCOCO head attached (`attach_head` through the compatibility alias)."""
    drafter = DCOCODrafter.from_block_drafter(make_drafter(target, block_size), **kwargs).eval()
    assert type(drafter) is BlockDrafter and head_of(drafter).name == "dcoco"
    return drafter


def test_corrector_has_the_published_parameter_count(target):
    drafter = dcoco(target)
    d = target.config.hidden_size
    assert sum(p.numel() for p in drafter.corrector.parameters()) == 512 * d + 132_353


def test_walk_picks_the_best_continuation_of_the_chosen_predecessor():
    first = torch.tensor([0.0, 2.0, 1.0])
    nxt = torch.tensor([[[5.0, 0.0, 0.0], [0.0, 0.0, 3.0], [9.0, 0.0, 0.0]]])  # (1, 3, 3)
    # batched over blocks: (n, K) and (n, k - 1, K, K); a second block whose slot 1 prefers candidate 2
    first_b = torch.stack([first, torch.tensor([0.0, 1.0, 4.0])])  # (2, 3)
    nxt_b = torch.stack([nxt, nxt])  # (2, 1, 3, 3)
    assert prefix_first_walk(first_b, nxt_b).tolist() == [[1, 2], [2, 0]]  # slot 1 -> cand 1; its best successor 2
    tables = conditional_log_probs(first, nxt)  # one block (a tree's)
    assert [t.shape for t in tables] == [(1, 3), (3, 3)]


def test_sampled_walk_returns_the_conditionals_it_drew_from():
    torch.manual_seed(0)
    first, nxt = torch.randn(2, 4), torch.randn(2, 2, 4, 4)  # n = 2 blocks, k = 3 slots, K = 4 candidates
    picks, q = sampled_walks(first, nxt, temperature=0.5, walks=3)
    assert picks.shape == (2, 3, 3) and q.shape == (2, 3, 3, 4)
    for b in range(2):
        for w in range(3):  # each walk's slot is drawn given the walk's own predecessor
            torch.testing.assert_close(q[b, w, 0], torch.softmax(first[b] / 0.5, -1))
            torch.testing.assert_close(q[b, w, 1], torch.softmax(nxt[b, 0, picks[b, w, 0]] / 0.5, -1))
            torch.testing.assert_close(q[b, w, 2], torch.softmax(nxt[b, 1, picks[b, w, 1]] / 0.5, -1))
    torch.testing.assert_close(q, walk_q(first, nxt, picks, 0.5))  # the q training reads along the same walks


def test_zero_transitions_reproduce_the_plain_drafter(target, prompt):
    base = make_drafter(target, 6)
    drafter = hf_specdec.attach_head(base, "dcoco").eval()
    assert head_of(base) is None and not hasattr(base, "corrector")  # the base stays as it was
    torch.nn.init.zeros_(drafter.corrector.scorer_out.weight)
    torch.nn.init.zeros_(drafter.corrector.scorer_out.bias)
    first, nxt = torch.randn(5), torch.zeros(3, 5, 5) + torch.randn(3, 1, 5)  # unary only: rows identical
    walk = prefix_first_walk(first[None], nxt[None])[0]
    assert walk.tolist() == [int(first.argmax())] + nxt[:, 0].argmax(-1).tolist()
    ref = target.generate(prompt, do_sample=False, max_new_tokens=NEW_TOKENS, assistant_model=base)
    out = target.generate(prompt, do_sample=False, max_new_tokens=NEW_TOKENS, assistant_model=drafter)
    assert torch.equal(out, ref)
    assert drafter.last_acceptance_stats.accepted == base.last_acceptance_stats.accepted
    base_gen, dcoco_gen = _generator(target, base), _generator(target, drafter)
    for gen in (base_gen, dcoco_gen):
        gen.queue_features(
            torch.randn(1, prompt.shape[1], gen.pending_width, generator=torch.Generator().manual_seed(0))
        )
    assert base_gen.head is None and dcoco_gen.head is not None  # the same (base's) generator, read by the head
    assert type(base_gen) is type(dcoco_gen)
    assert torch.equal(base_gen.propose(prompt, 5)[0], dcoco_gen.propose(prompt, 5)[0])


def _generator(target, drafter):
    from transformers import GenerationConfig

    from hf_specdec.models.registry import generator_class_for

    gen = generator_class_for(drafter)(drafter, target, GenerationConfig(max_length=100))
    gen.pending_width = len(drafter.config.target_layer_ids) * target.config.hidden_size
    return gen


@pytest.mark.parametrize(
    "settings",
    [
        DecodingSettings(budget="fixed"),
        DecodingSettings(budget="fixed", tree_budget=10, tree_topk=2),
        DecodingSettings(budget="fixed", prompt_lookup_tokens=4),
    ],
    ids=["chain", "tree", "chain+lookup"],
)
@pytest.mark.parametrize("block_size", [3, 5, 8])
@pytest.mark.parametrize("accept", ["none", "all", "j"])
def test_dcoco_oracles_give_plain_greedy_output(target, prompt, block_size, accept, settings):
    k = block_size - 1
    j = {"none": 0, "all": None, "j": max(1, k // 2)}[accept]
    drafter = oracle(target, prompt, block_size, j, NEW_TOKENS, cls=OracleDCOCODrafter, eos_token_id=None)
    drafter.reference_rank = 50  # beyond the 16 candidates: the right token is never drafted at the corruption
    drafter.decoding = settings
    ref = target.generate(prompt, do_sample=False, max_new_tokens=NEW_TOKENS, eos_token_id=None)
    out = target.generate(
        prompt, do_sample=False, max_new_tokens=NEW_TOKENS, eos_token_id=None, assistant_model=drafter
    )
    assert torch.equal(out, ref)
    stats = drafter.last_acceptance_stats
    if not settings.prompt_lookup_tokens:
        assert set(stats.accepted[:-1]) == {k if j is None else j}


def test_untrained_dcoco_gives_plain_output_and_samples(target, prompt):
    drafter = dcoco(target, 6, corrector_candidates=8)
    ref = target.generate(prompt, do_sample=False, max_new_tokens=NEW_TOKENS)
    for settings in (DecodingSettings(budget="fixed"), DecodingSettings(budget="fixed", tree_budget=12, tree_topk=3)):
        drafter.decoding = settings
        out = target.generate(prompt, do_sample=False, max_new_tokens=NEW_TOKENS, assistant_model=drafter)
        assert torch.equal(out, ref)
    drafter.decoding = DecodingSettings(budget="fixed", sample_branches=2)
    out = target.generate(prompt, do_sample=True, temperature=0.8, max_new_tokens=NEW_TOKENS, assistant_model=drafter)
    assert out.shape == (1, prompt.shape[1] + NEW_TOKENS)


def test_save_and_load_through_auto_model(target, prompt, tmp_path):
    drafter = dcoco(target, 4, corrector_candidates=6)
    torch.nn.init.normal_(drafter.corrector.scorer_out.weight, std=1.0)  # non-zero: a real round trip
    drafter.decoding = DecodingSettings(budget="fixed", tree_budget=5)
    drafter.save_pretrained(tmp_path)
    loaded = AutoModel.from_pretrained(tmp_path).eval()
    assert type(loaded) is BlockDrafter and isinstance(loaded, DCOCODrafter)  # the base's class, carrying the head
    assert loaded.config.model_type == BlockDrafterConfig.model_type and head_of(loaded).name == "dcoco"
    assert loaded.config.head["type"] == "dcoco" and loaded.config.head["corrector_candidates"] == 6
    assert loaded.decoding == drafter.decoding
    for name, tensor in drafter.state_dict().items():
        assert torch.equal(tensor, loaded.state_dict()[name]), name


def test_selection_loss_skips_slots_outside_the_candidates():
    scores = torch.tensor([[2.0, 0.0], [0.0, 1.0], [5.0, 5.0]])
    loss = dcoco_selection_loss(scores, torch.tensor([0, -100, 1]), torch.tensor([1.0, 1.0, 3.0]))
    ce0 = -torch.log_softmax(scores[0], -1)[0]
    ce2 = -torch.log_softmax(scores[2], -1)[1]
    torch.testing.assert_close(loss, (ce0 + 3 * ce2) / 4)
    assert dcoco_selection_loss(scores, torch.full((3,), -100), torch.ones(3)) == 0


def test_config_rejects_bad_corrector_shapes(target):
    with pytest.raises(ValueError, match="corrector_candidates"):
        BlockDrafterConfig.for_target(target.config, mask_token_id=1, head={"type": "dcoco", "corrector_candidates": 0})
    with pytest.raises(ValueError, match="corrector_candidates"):
        hf_specdec.attach_head(make_drafter(target, 4), "dcoco", corrector_candidates=0)
    with pytest.raises(ValueError, match="corrector_candidates"):  # the config class of the old saved format too
        DCOCOConfig.for_target(target.config, mask_token_id=1, corrector_candidates=0)


def test_load_drafter_picks_the_class_from_the_checkpoint(target, tmp_path):
    from hf_specdec import load_drafter

    drafter = dcoco(target, 4, corrector_candidates=5)
    drafter.save_pretrained(tmp_path / "dcoco")
    make_drafter(target, 4).save_pretrained(tmp_path / "block")
    loaded = load_drafter(tmp_path / "dcoco")
    assert type(loaded) is BlockDrafter and head_of(loaded).name == "dcoco"
    block = load_drafter(tmp_path / "block")
    assert type(block) is BlockDrafter and head_of(block) is None and not isinstance(block, DCOCODrafter)


def test_a_folder_saved_in_the_old_dcoco_format_loads_with_its_head(target, tmp_path):
    """A folder saved when the pair was a class of its own (model_type hf_specdec_dcoco, the head's shape at the top
    level of its config, no `head`) loads as the base with the head attached, through AutoModel and load_drafter."""
    import json

    from hf_specdec import load_drafter

    drafter = dcoco(target, 4, corrector_candidates=5)
    torch.nn.init.normal_(drafter.corrector.scorer_out.weight, std=1.0)
    drafter.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    shape = {k: v for k, v in config.pop("head").items() if k != "type"}
    config.pop("backbone", None)
    (tmp_path / "config.json").write_text(json.dumps({**config, **shape, "model_type": "hf_specdec_dcoco"}))
    for load in (AutoModel.from_pretrained, load_drafter, DCOCODrafter.from_pretrained):
        legacy = load(tmp_path)
        assert type(legacy) is BlockDrafter and isinstance(legacy.config, DCOCOConfig), load
        assert head_of(legacy).name == "dcoco" and legacy.config.head["corrector_candidates"] == 5
        for name, tensor in drafter.state_dict().items():
            assert torch.equal(tensor, legacy.state_dict()[name]), name

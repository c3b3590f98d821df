"""The PARD drafter kind: a causal LM plus a mask token, drafting a block in one forward.

Contracts: greedy output equals plain greedy with drafts that are all, none or exactly j accepted (chain, tree,
lookup branch, transformers' loop and hf_specdec's, batches, the server); the drafter's cache holds exactly the
committed tokens after every pass; a PARD over the target itself has its first draft accepted at every step; a
zero-initialised feature projection drafts exactly as the plain LM; decoding feeds each slot the target features
training gives it; an adapter folder loads as base + adapter.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from conftest import MASK_ID, VOCAB, OracleReference, OracleScores, assert_batch_and_server_equal_plain, tiny_target
from peft import LoraConfig, get_peft_model
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, LogitsProcessorList, TemperatureLogitsWarper

import hf_specdec
from hf_specdec import DecodingSettings, PardCandidateGenerator, PardConfig, PardDrafter
from hf_specdec.models.pard.kept_by_q import kept_of
from hf_specdec.models.pard.layout import PardLayout, layout_features
from hf_specdec.models.target_features import drafter_layer_ids
from hf_specdec.training.data import target_features


class OraclePardGenerator(OracleScores, PardCandidateGenerator):
    pass


class OraclePardDrafter(OracleReference, PardDrafter):
    pass


hf_specdec.register_drafter_kind(OraclePardDrafter, OraclePardGenerator, config_class=PardConfig)


def tiny_lm(seed: int = 5, layers: int = 2) -> LlamaForCausalLM:
    """A small causal LM sharing the tiny targets' vocabulary (the 'same family' of the tests)."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        initializer_range=0.3,
    )
    return LlamaForCausalLM(config).eval()


def pard(target, block_size=4, cls=PardDrafter, lm=None, **kwargs) -> PardDrafter:
    lm = (lm or tiny_lm()).to(target.device)
    drafter = cls.from_causal_lm(lm, target, mask_token_id=MASK_ID, block_size=block_size, **kwargs)
    drafter.decoding = DecodingSettings(budget="fixed")
    return drafter.eval()


def pard_oracle(target, prompt, block_size, corrupt_at, new_tokens) -> OraclePardDrafter:
    drafter = pard(target, block_size, cls=OraclePardDrafter)
    drafter.reference = target.generate(
        prompt, max_new_tokens=new_tokens + block_size, do_sample=False, eos_token_id=None
    )
    drafter.corrupt_at = corrupt_at
    return drafter


SETTINGS = {
    "chain (transformers' loop)": DecodingSettings(budget="fixed"),
    "tree": DecodingSettings(budget="fixed", tree_budget=6, tree_topk=2),
    "chain + lookup": DecodingSettings(budget="fixed", prompt_lookup_tokens=3),
    "adaptive": DecodingSettings(),
}


@pytest.mark.parametrize("corrupt_at", [None, 0, 2])
@pytest.mark.parametrize("name", list(SETTINGS))
def test_greedy_output_equals_plain_when_all_none_or_j_drafts_are_accepted(target, prompt, corrupt_at, name, device):
    target, prompt = target.to(device), prompt.to(device)
    plain = target.generate(prompt, max_new_tokens=20, do_sample=False)
    drafter = pard_oracle(target, prompt, 5, corrupt_at, 20)
    drafter.decoding = SETTINGS[name]
    out = target.generate(prompt, max_new_tokens=20, do_sample=False, assistant_model=drafter)
    assert torch.equal(out, plain)
    stats = drafter.last_acceptance_stats
    if name.startswith("chain"):  # every full block accepts the pattern asked for (lookup may add more)
        expected = {None: 4, 0: 0, 2: 2}[corrupt_at]
        full = [a for d, a in zip(stats.drafted, stats.accepted, strict=True) if d == 4]
        assert full and all(a >= expected if "lookup" in name else a == expected for a in full)


def test_pard_over_the_target_itself_has_its_first_draft_accepted_every_step(prompt, device):
    """Draft 1 is the LM's own next token at the anchor: with the target as the LM it is always right, which holds
    only if the drafter's cache and positions line up with the committed tokens at every step."""
    target, prompt = tiny_target("llama", device=device), prompt.to(device)
    twin = tiny_target("llama", device=device)  # same seed: the same weights
    drafter = pard(target, block_size=4, lm=twin)
    plain = target.generate(prompt, max_new_tokens=24, do_sample=False)
    out = target.generate(prompt, max_new_tokens=24, do_sample=False, assistant_model=drafter)
    assert torch.equal(out, plain)
    stats = drafter.last_acceptance_stats
    assert all(a >= 1 for a, d in zip(stats.accepted, stats.drafted, strict=True) if d)


def test_the_drafter_cache_holds_exactly_the_committed_tokens(target, prompt, device):
    target, prompt = target.to(device), prompt.to(device)
    drafter = pard(target, block_size=4)
    gen = PardCandidateGenerator(drafter, target, GenerationConfig(max_length=64))
    ids = prompt
    for extra in ([7], [8, 9, 10], [11]):  # commits of 1, 3 and 1 tokens
        ids = torch.cat([ids, torch.tensor([extra], device=device)], dim=-1)
        hidden, scores = gen.draft_scores(ids, 3)
        assert gen.cache.get_seq_length() == ids.shape[1]
        assert hidden.shape == (3, drafter.config.hidden_size) and scores.shape == (3, VOCAB)
    # the same drafts as a fresh pass over the whole sequence (the cache changes nothing)
    fresh = PardCandidateGenerator(drafter, target, GenerationConfig(max_length=64))
    assert torch.allclose(fresh.draft_scores(ids, 3)[1], scores, atol=1e-5)


@pytest.mark.parametrize("context", ["copying", "none"])
def test_rows_copying_a_span_choose_sampled_blocks_from_a_memory_of_their_own(target, context):
    """With sampled_choice_context="copying", blocks of a row whose last step accepted a prompt-lookup node are
    chosen and judged in a memory of their own (`ar_choice.py`); a judged step goes to the memory its block was
    chosen from, even when the row stopped or started copying since. With "none", one memory judges them all."""
    drafter = pard(target, block_size=4)
    drafter.decoding = DecodingSettings(sampled_ar_drafts=3, sampled_choice_context=context)  # budget "auto"
    gen = PardCandidateGenerator(drafter, target, GenerationConfig(max_length=64, do_sample=True))  # a sampled call
    for copying in [False] * 3 + [True] * 4 + [False]:
        gen.copying = copying  # what the step sets from the row's last step, before drafting
        gen._ar_count()
        gen.stats.record(3, 1)  # the block's step: 1 of 3 drafts accepted
    with pytest.raises(ValueError, match="sampled_choice_context"):
        DecodingSettings(sampled_choice_context="lookup")
    memories = drafter._ar_choices
    if context == "none":
        assert set(memories) == {""} and memories[""].runs == {1: 3, 2: 3, 3: 2}
        return
    rest, copying = memories[""], memories["copying"]
    assert rest is drafter._ar_choice and rest.runs == {1: 3, 2: 1} and copying.runs == {1: 3, 2: 1}
    assert len(rest.recent[1]) == 3 and 2 not in rest.recent  # the last step is judged at the next block
    assert len(copying.recent[1]) == 3 and len(copying.recent[2]) == 1  # the step of the row's last copying block


@pytest.mark.parametrize("stop_on", ["draft", "path", "kept"])
def test_base_chains_end_where_their_stop_rule_says(stop_on):
    """A base-LM chain keeps drafting while the q of its last draft ("draft"), the product of its drafts' q ("path")
    or of their chances of being kept ("kept": a memory that has judged no chain yet, each bucket's middle q) reaches
    `sampled_base_stop`, and ends at the first draft that falls below it (or at k drafts)."""
    target, prompt = tiny_target("llama"), torch.tensor([[1, 5, 9, 12, 7, 3, 8, 2]])
    drafter = PardDrafter.from_causal_lm(tiny_target("llama", seed=7), target, mask_token_id=MASK_ID, block_size=4)
    drafter.attach_base_lm(tiny_target("llama", seed=7))
    stop, k = 0.5, 12
    drafter.decoding = DecodingSettings(
        budget="fixed", sampled_base_drafts=k, sampled_base_stop=stop, sampled_base_stop_on=stop_on
    )
    sharp = LogitsProcessorList([TemperatureLogitsWarper(0.2)])  # random tiny LMs: sharp enough to run on
    torch.manual_seed(0)
    lengths = set()
    for _ in range(40):  # a new generation each time: its base LM reads the prompt, the anchor last
        gen = PardCandidateGenerator(drafter, target, GenerationConfig(max_length=64, do_sample=True))
        tree = gen.sampled_tree(prompt, k, 1, sharp)
        q = [float(tree.q[d, tree.tokens[d]]) for d in range(len(tree))]
        chance = [kept_of(drafter, sharp).chance(x) for x in q] if stop_on == "kept" else q
        sure = [math.prod(chance[: d + 1]) for d in range(len(q))] if stop_on != "draft" else q
        assert all(s >= stop for s in sure[:-1]), sure
        assert len(tree) == k or sure[-1] < stop, sure
        lengths.add(len(tree))
    assert len(lengths) > 2, lengths  # chains ended at several depths


def test_batches_and_the_server_equal_plain(target, device):
    target = target.to(device)
    g = torch.Generator().manual_seed(9)
    prompts = [torch.randint(3, VOCAB - 1, (n,), generator=g) for n in (9, 14)]
    drafter = pard(target, block_size=4)
    drafter.decoding = DecodingSettings(budget="fixed", tree_budget=4, tree_topk=2)
    assert_batch_and_server_equal_plain(target, drafter, prompts, new_tokens=12)


@pytest.mark.parametrize("inject", [False, True])
def test_rows_drafted_together_get_what_each_gets_alone(target, inject):
    """`draft_rows` (one drafter pass for a batch's rows) leaves every row the outputs and the cache of committed
    tokens its own pass gives: rows with different caches, one joining with an empty cache, features injected."""
    drafter = pard(target, block_size=4, feature_injection=inject)
    if inject:
        torch.nn.init.normal_(drafter.feature_proj.weight, std=1.0)
    width = len(drafter.config.target_layer_ids) * drafter.config.target_hidden_size
    g = torch.Generator().manual_seed(3)
    rows = [torch.randint(3, VOCAB - 1, (1, n), generator=g) for n in (9, 14, 5)]
    feats = [torch.randn(1, 40, width, generator=g) for _ in rows]

    def generators():
        gens = [PardCandidateGenerator(drafter, target, GenerationConfig(max_length=64)) for _ in rows]
        for gen, ids, f in zip(gens, rows, feats, strict=True):
            gen.queue_features(f[:, : ids.shape[1]])
        return gens

    alone, together = generators(), generators()
    for grow, members in (((0, 0, 0), [0, 1]), ((3, 1, 0), [0, 1, 2]), ((1, 2, 4), [0, 1, 2])):
        for b, n in enumerate(grow):
            if n:
                extra = torch.randint(3, VOCAB - 1, (1, n), generator=g)
                before = rows[b].shape[1]
                rows[b] = torch.cat([rows[b], extra], dim=-1)
                for gen in (alone[b], together[b]):
                    gen.queue_features(feats[b][:, before : rows[b].shape[1]])
        PardCandidateGenerator.draft_rows([together[b] for b in members], [rows[b] for b in members])
        for b in members:
            hidden, scores = alone[b].draft_scores(rows[b], 3)
            hidden_t, scores_t = together[b].draft_scores(rows[b], 3)
            assert torch.allclose(scores_t, scores, atol=1e-4) and torch.allclose(hidden_t, hidden, atol=1e-4)
            assert together[b].cache.get_seq_length() == rows[b].shape[1] == alone[b].cache.get_seq_length()
            for mine, theirs in zip(together[b].cache.layers, alone[b].cache.layers, strict=True):
                assert torch.allclose(mine.keys, theirs.keys, atol=1e-4)
                assert torch.allclose(mine.values, theirs.values, atol=1e-4)
            assert together[b].ready is None  # used once


def test_batches_and_the_server_draft_rows_together_and_equal_plain(target, device, monkeypatch):
    """Four rows of different lengths drafting in one pass per step, as a chain and as trees."""
    target = target.to(device)
    g = torch.Generator().manual_seed(4)
    prompts = [torch.randint(3, VOCAB - 1, (n,), generator=g) for n in (6, 11, 17, 8)]
    together = []  # rows per draft_rows call
    draft_rows = PardCandidateGenerator.draft_rows.__func__

    def counted(cls, generators, input_ids):
        together.append(len(generators))
        draft_rows(cls, generators, input_ids)

    monkeypatch.setattr(PardCandidateGenerator, "draft_rows", classmethod(counted))
    for settings in (DecodingSettings(budget="fixed"), DecodingSettings(budget="fixed", tree_budget=5, tree_topk=2)):
        drafter = pard(target, block_size=5)
        drafter.decoding = settings
        together.clear()
        assert_batch_and_server_equal_plain(target, drafter, prompts, new_tokens=14)
        assert max(together) == 4  # the batch's rows were drafted in one pass


@pytest.mark.parametrize("name", ["chain (transformers' loop)", "tree", "adaptive"])
def test_a_draft_vocabulary_keeps_output_exact(target, prompt, name, device):
    target, prompt = target.to(device), prompt.to(device)
    drafter = pard(target, block_size=4)
    drafter.set_draft_vocab(torch.arange(3, 120, device=device))  # the head scores ids 3..119 only
    drafter.decoding = SETTINGS[name]
    out = target.generate(prompt, max_new_tokens=16, do_sample=False, assistant_model=drafter)
    assert torch.equal(out, target.generate(prompt, max_new_tokens=16, do_sample=False))
    gen = PardCandidateGenerator(drafter, target, GenerationConfig(max_length=64))
    tree = gen.greedy_tree(prompt, 3, 0, 1)
    assert all(3 <= t < 120 for t in tree.tokens)  # drafts come from the draft vocabulary, as full ids


def test_a_fresh_feature_projection_drafts_exactly_as_the_plain_lm(target, prompt, device):
    target, prompt = target.to(device), prompt.to(device)
    lm = tiny_lm()
    plain_drafter = pard(target, lm=lm)
    injected = pard(target, lm=lm, feature_injection=True)
    assert torch.count_nonzero(injected.feature_proj.weight) == 0
    for drafter in (plain_drafter, injected):
        drafter.decoding = DecodingSettings(budget="fixed")
        target.generate(prompt, max_new_tokens=16, do_sample=False, assistant_model=drafter)
    assert plain_drafter.last_acceptance_stats.accepted == injected.last_acceptance_stats.accepted
    torch.nn.init.normal_(injected.feature_proj.weight, std=1.0)  # features that change the drafts: still exact
    for name in ("chain (transformers' loop)", "tree"):
        injected.decoding = SETTINGS[name]
        out = target.generate(prompt, max_new_tokens=16, do_sample=False, assistant_model=injected)
        assert torch.equal(out, target.generate(prompt, max_new_tokens=16, do_sample=False))


@pytest.mark.parametrize("name", ["chain (transformers' loop)", "tree"])
def test_decoding_feeds_each_slot_the_target_features_training_gives_it(target, prompt, name):
    """Train and serve agree on PARD-2 features: every drafter pass while decoding reads, per fed slot, the
    features `layout_features` gives that slot in training (token t: the target's features of token t-1; a mask:
    its anchor's), taken from one full target forward over the final sequence (`target_features`)."""
    drafter = pard(target, lm=tiny_lm(), feature_injection=True, feature_layers=[-1, 1])
    torch.nn.init.normal_(drafter.feature_proj.weight, std=1.0)
    drafter.decoding = SETTINGS[name]
    fed, forward = [], drafter.forward

    def recording_forward(input_ids, position_ids=None, features=None, **kwargs):
        fed.append((input_ids[0], position_ids[0], features[0]))
        return forward(input_ids, position_ids=position_ids, features=features, **kwargs)

    drafter.forward = recording_forward
    out = target.generate(prompt, max_new_tokens=20, do_sample=False, assistant_model=drafter)
    layers = drafter_layer_ids(drafter.config, target.config)
    full = target_features(target, out[0].tolist(), layers)  # (T, L*H)
    assert len(fed) >= 5
    for ids, slots, features in fed:
        real = ids != MASK_ID
        anchor = torch.where(real, slots, slots[real].max())
        layout = PardLayout(depth=slots - anchor, slot=slots, anchor=anchor)
        torch.testing.assert_close(features.float(), layout_features(full, layout), atol=1e-4, rtol=1e-4)


def test_saved_full_weights_and_adapter_folders_load_with_load_drafter(tmp_path, target, prompt):
    lm = tiny_lm()
    lm.save_pretrained(tmp_path / "base")
    drafter = pard(target, lm=lm, base_model=str(tmp_path / "base"))
    drafter.save_pretrained(tmp_path / "full")
    again = hf_specdec.load_drafter(tmp_path / "full")
    assert isinstance(again, PardDrafter) and again.config.block_size == 4
    # a config alone: the base LM as it is (a zero-shot PARD drafter)
    drafter.config.save_pretrained(tmp_path / "zero-shot")
    zero = hf_specdec.load_drafter(tmp_path / "zero-shot")
    assert torch.equal(zero.lm.lm_head.weight, lm.lm_head.weight)
    # an adapter folder: this kind's config.json + a LoRA adapter; base_model names the LM
    peft_model = get_peft_model(drafter, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    peft_model.save_pretrained(tmp_path / "adapter")
    merged = peft_model.merge_and_unload()
    merged.set_draft_vocab(torch.arange(3, 200))  # a draft vocabulary travels with the adapter folder
    merged.save_adapter_folder(tmp_path / "adapter")
    assert not list((tmp_path / "adapter").glob("model*.safetensors"))
    loaded = hf_specdec.load_drafter(tmp_path / "adapter")
    assert isinstance(loaded, PardDrafter)
    for a, b in zip(loaded.state_dict().values(), merged.state_dict().values(), strict=True):
        assert torch.equal(a, b) if a.dtype == torch.long else torch.allclose(a, b)
    assert torch.equal(loaded.draft_vocab, torch.arange(3, 200))
    config = json.loads((tmp_path / "adapter" / "config.json").read_text())
    assert config["model_type"] == "hf_specdec_pard" and config["base_model"] == str(tmp_path / "base")


def test_a_missing_base_model_says_how_to_build_it(tmp_path, target):
    drafter = pard(target, base_model="no-such-offline-model")
    peft_model = get_peft_model(drafter, LoraConfig(r=2, target_modules=["q_proj"]))
    peft_model.save_pretrained(tmp_path / "adapter")
    drafter.config.save_pretrained(tmp_path / "adapter")
    with pytest.raises(OSError, match="scripts/offline_models.py no-such-offline-model"):
        hf_specdec.load_drafter(tmp_path / "adapter")


@pytest.mark.parametrize(
    "change, message",
    [
        ({"mask_token_id": -1}, "mask_token_id"),
        ({"mask_token_id": VOCAB}, "mask_token_id"),
        ({"target_layer_ids": [-5]}, "target_layer_ids"),
        ({"target_layer_ids": [1, 1]}, "target_layer_ids"),
        ({"block_size": 1}, "block_size"),
    ],
)
def test_bad_configs_are_refused_when_built(target, change, message):
    with pytest.raises(ValueError, match=message):
        PardConfig.for_target(target.config, tiny_lm().config, **{"mask_token_id": MASK_ID, **change})


@pytest.mark.parametrize("name", ["chain (transformers' loop)", "tree", "adaptive"])
def test_a_pard_drafter_without_features_serves_targets_of_any_shape(target, prompt, name):
    """PARD reads only tokens: a target with more layers, another width and more ids (the same tokenizer's first
    256) gets exactly its own greedy output through it; a PARD-2 drafter, which reads the target's layers, is refused
    for that target, naming what differs."""
    drafter = pard(target)
    drafter.decoding = SETTINGS[name]
    other = tiny_target("qwen3", seed=3, layers=6, vocab=VOCAB + 44)  # 6 layers, head_dim 16, 300 ids
    out = other.generate(prompt, assistant_model=drafter, max_new_tokens=12, do_sample=False, eos_token_id=None)
    assert torch.equal(out, other.generate(prompt, max_new_tokens=12, do_sample=False, eos_token_id=None))
    torch.manual_seed(0)
    sampled = other.generate(prompt, assistant_model=drafter, max_new_tokens=12, do_sample=True, eos_token_id=None)
    assert sampled.shape[1] == prompt.shape[1] + 12 and int(sampled.max()) < VOCAB + 44
    features = pard(target)
    features.add_feature_injection(target.config, [-1, -2])
    with pytest.raises(ValueError, match="layer count 4 != target's 6"):
        other.generate(prompt, assistant_model=features, max_new_tokens=4, do_sample=False)


def test_an_adapter_folder_that_samples_base_chains_keeps_its_base_weights_apart(tmp_path, target, prompt):
    """A folder whose decoding sets `sampled_base_drafts` loads the merged drafter and, beside it, the base LM's own
    weights (`base_lm`: decoder layers copied before the merge, embeddings shared, never saved); greedy output is
    plain greedy's, and a sampled block is drawn from the base LM's conditionals."""
    lm = tiny_lm()
    lm.save_pretrained(tmp_path / "base")
    drafter = pard(target, lm=tiny_lm(), base_model=str(tmp_path / "base"))
    peft_model = get_peft_model(drafter, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    peft_model.save_pretrained(tmp_path / "adapter")
    merged = peft_model.merge_and_unload()
    # as loaded: "auto" may time int8 copies faster on some CPUs, whose q are not the fp32 base's compared below
    merged.decoding = DecodingSettings(
        budget="fixed", sampled_base_drafts=5, sampled_base_stop=0.0, sampled_base_weights="as_loaded"
    )
    merged.save_adapter_folder(tmp_path / "adapter")
    loaded = hf_specdec.load_drafter(tmp_path / "adapter")
    base = loaded.base_lm
    assert base is not None and base is not loaded.lm
    for name, weight in lm.state_dict().items():  # the base's weights, not the merged ones
        assert torch.equal(base.state_dict()[name], weight), name
    merged_q = loaded.lm.model.layers[0].self_attn.q_proj.weight
    assert not torch.equal(merged_q, lm.model.layers[0].self_attn.q_proj.weight)  # the drafter holds the merged
    assert base.get_input_embeddings().weight is loaded.get_input_embeddings().weight  # shared, not copied
    assert set(loaded.state_dict()) == set(merged.state_dict())  # not a submodule: never saved
    plain = target.generate(prompt, max_new_tokens=12, do_sample=False)
    assert torch.equal(target.generate(prompt, max_new_tokens=12, do_sample=False, assistant_model=loaded), plain)
    # a sampled block: its q rows are the base LM's conditionals given the prompt and the drafts before
    generator = PardCandidateGenerator(loaded, target, GenerationConfig(do_sample=True))
    torch.manual_seed(0)
    tree = generator.sampled_tree(prompt, 5, 1, None)
    assert len(tree) == 5
    seq = torch.cat([prompt, torch.tensor([tree.tokens])], dim=-1)
    with torch.no_grad():
        want = torch.softmax(lm(seq).logits[0, prompt.shape[1] - 1 : -1].float(), dim=-1)  # (5, V)
    assert torch.allclose(tree.q[:, : want.shape[1]], want, atol=1e-5)
    # without the setting in the folder the base is not kept (no memory spent)
    merged.decoding = DecodingSettings()
    merged.save_adapter_folder(tmp_path / "adapter")
    assert hf_specdec.load_drafter(tmp_path / "adapter").base_lm is None


def test_sampled_calls_of_a_drafter_that_chooses_its_blocks_leave_plain_steps_to_the_choice(target):
    """With the adaptive budget, exact-q sampling and more than one way to draft a sampled block, the drafter's
    per-block choice (plain steps included) decides plain steps and the budget only cuts, or with base-LM chains
    verifies each block whole; greedy calls and fixed budgets are as before."""
    from hf_specdec.decoding.batch import SpeculativeBatch
    from hf_specdec.decoding.budget import Budget, FixedBudget

    drafter = pard(target)
    drafter.decoding = DecodingSettings(budget="auto", sampled_ar_drafts=3)
    sampled = SpeculativeBatch(target, drafter, GenerationConfig(do_sample=True))
    greedy = SpeculativeBatch(target, drafter, GenerationConfig(do_sample=False))
    assert isinstance(sampled.budget, Budget) and not sampled.budget.plain_steps and sampled.budget.cuts
    assert isinstance(greedy.budget, Budget) and greedy.budget.plain_steps and greedy.budget.cuts
    drafter.decoding = DecodingSettings(budget="auto", sampled_base_drafts=8)
    chains = SpeculativeBatch(target, drafter, GenerationConfig(do_sample=True)).budget
    assert not chains.plain_steps and not chains.cuts
    assert SpeculativeBatch(target, drafter, GenerationConfig(do_sample=False)).budget.cuts
    drafter.decoding = DecodingSettings(budget="auto", sampled_ar_drafts=1)  # one way only: the budget decides
    assert SpeculativeBatch(target, drafter, GenerationConfig(do_sample=True)).budget.plain_steps
    drafter.decoding = DecodingSettings(budget="fixed", sampled_ar_drafts=3)
    assert isinstance(SpeculativeBatch(target, drafter, GenerationConfig(do_sample=True)).budget, FixedBudget)

"""A drafter kind defined in this one module and registered with one call reaches every consumer.

Proof that adding a kind touches nothing else in hf_specdec: `generate(assistant_model=...)` (transformers' loop
for a chain, hf_specdec's loop for a tree), a batch, the server, `AutoModel` / `load_drafter`, SpecOPD's policy
table and the model card all pick it up from `register_drafter_kind`, and greedy output stays the target's.
"""

from __future__ import annotations

import torch
from conftest import MASK_ID, VOCAB, assert_batch_and_server_equal_plain, tiny_target
from transformers import AutoModel

import hf_specdec
from hf_specdec import BlockDraftCandidateGenerator, BlockDrafter, BlockDrafterConfig, DecodingSettings, KindCard
from hf_specdec.models.block_drafter import BlockPolicy
from hf_specdec.models.registry import kind_for_model_type, kind_of
from hf_specdec.training.specopd import policy_for


class EchoConfig(BlockDrafterConfig):
    model_type = "hf_specdec_test_echo"

    def __init__(self, echo_bias: float = 4.0, **kwargs) -> None:
        self.echo_bias = echo_bias
        super().__init__(**kwargs)


class EchoDrafter(BlockDrafter):
    """A block drafter with a prior for repeating the anchor token (a made-up kind, small on purpose)."""

    config_class = EchoConfig


class EchoGenerator(BlockDraftCandidateGenerator):
    calls = 0

    def draft_scores(self, input_ids, k):
        hidden, logits = super().draft_scores(input_ids, k)  # the real drafter pass: (k + 1, H), (k, V)
        EchoGenerator.calls += 1
        bias = torch.zeros_like(logits)
        bias[:, input_ids[0, -1]] = self.drafter.config.echo_bias
        return hidden, logits + bias


class EchoPolicy(BlockPolicy):
    pass


KIND = hf_specdec.register_drafter_kind(
    EchoDrafter,
    EchoGenerator,
    policy_class=EchoPolicy,
    card=KindCard("An echo drafter (a block drafter that likes repeating its anchor)", "Test kind.", ("echo",)),
)


def echo_drafter(target) -> EchoDrafter:
    torch.manual_seed(1)
    return EchoDrafter.for_target(target, block_size=4, mask_token_id=MASK_ID).eval()


def test_one_call_registers_every_table():
    assert kind_of(EchoDrafter) is KIND and kind_for_model_type("hf_specdec_test_echo") is KIND
    assert KIND.config_class is EchoConfig and KIND.generator_class is EchoGenerator
    assert kind_of(BlockDrafter).model_class is BlockDrafter  # the parent kind is untouched


def test_generate_chain_and_tree_equal_plain_greedy():
    target = tiny_target("llama")
    drafter = echo_drafter(target)
    prompt = torch.tensor([[5, 9, 9, 9, 17, 9, 9, 23, 9, 9, 9]])
    plain = target.generate(prompt, max_new_tokens=20, do_sample=False)
    fixed = dict(budget="fixed")  # the kind must reach the drafting steps: no budget may run them plain
    for settings in (DecodingSettings(**fixed), DecodingSettings(tree_budget=6, prompt_lookup_tokens=4, **fixed)):
        drafter.decoding = settings
        before = EchoGenerator.calls
        out = target.generate(prompt, max_new_tokens=20, do_sample=False, assistant_model=drafter)
        assert torch.equal(out, plain), settings
        assert EchoGenerator.calls > before and drafter.last_acceptance_stats.verify_forwards > 0


def test_batch_and_server_equal_plain_greedy():
    target = tiny_target("llama")
    drafter = echo_drafter(target)
    g = torch.Generator().manual_seed(4)
    prompts = [torch.randint(3, VOCAB - 1, (n,), generator=g) for n in (7, 11, 5)]
    assert_batch_and_server_equal_plain(target, drafter, prompts, 9)


def test_saved_kind_loads_by_auto_and_load_drafter_and_gets_its_card_and_policy(tmp_path):
    target = tiny_target("llama")
    drafter = echo_drafter(target)
    drafter.config.echo_bias = 2.5
    drafter.save_pretrained(tmp_path / "echo")
    for loaded in (AutoModel.from_pretrained(tmp_path / "echo"), hf_specdec.load_drafter(tmp_path / "echo")):
        assert type(loaded) is EchoDrafter and loaded.config.echo_bias == 2.5
        saved, back = drafter.state_dict(), loaded.state_dict()
        assert saved.keys() == back.keys() and all(torch.equal(saved[n], back[n]) for n in saved)
    card = hf_specdec.render_card(tmp_path / "echo", "org/echo-drafter", target_id="org/tiny-target")
    assert "An echo drafter" in str(card) and "echo" in card.data.tags and "EchoDrafter" in str(card)
    policy = policy_for(drafter, target.get_input_embeddings(), 1.0, torch.arange(VOCAB))
    assert type(policy) is EchoPolicy

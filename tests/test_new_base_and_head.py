"""A third base and a third head, each defined in this one module: bases and heads meet at one seam.

The base (`MaskLMDrafter`) is a tiny causal LM of a class of its own that drafts a block with mask tokens (re-reading
the whole context every step: no cache, small on purpose). Both shipped heads attach to it with `attach_head`, and
greedy output stays the target's through `generate` (transformers' loop and hf_specdec's), a batch and the server.

The head (`OffsetHead`) adds a learned offset to every drafted slot's scores. It attaches to both shipped bases (the
block drafter and PARD) and to the base above, with the same guarantees, and it saves and loads like the others.
Nothing outside this module is edited for either.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from conftest import MASK_ID, VOCAB, assert_batch_and_server_equal_plain, make_drafter, tiny_target
from torch import nn
from transformers import (
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    LogitsProcessorList,
    PretrainedConfig,
    PreTrainedModel,
)

import hf_specdec
from hf_specdec import BlockDraftCandidateGenerator, DecodingSettings, KindCard, PardDrafter
from hf_specdec.models.policy import BlockPolicy
from hf_specdec.models.settings import SavedDecoding
from hf_specdec.training.specopd import policy_for
from hf_specdec.verification.processed import call_temperature
from hf_specdec.verification.tree import DraftTree, best_first_tree

BLOCK = 4
NEW_TOKENS = 24


# ---- the third base: a causal LM of its own class, drafting with masks ----


def lm_fields(hidden: int) -> dict:
    """A tiny Llama's config fields (the target's vocabulary)."""
    return dict(
        vocab_size=VOCAB,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        initializer_range=0.3,
    )


class MaskLMConfig(PretrainedConfig):
    model_type = "hf_specdec_test_mask_lm"

    def __init__(
        self,
        lm: dict | None = None,
        block_size: int = BLOCK,
        mask_token_id: int = MASK_ID,
        target_layer_ids: list[int] | None = None,
        target_hidden_size: int | None = None,
        target_num_hidden_layers: int | None = None,
        target_vocab_size: int | None = None,
        decoding: dict | None = None,
        head: dict | None = None,
        backbone: str | None = None,
        **kwargs,
    ) -> None:
        self.lm = lm or {}
        self.block_size, self.mask_token_id = block_size, mask_token_id
        self.target_layer_ids = target_layer_ids or [0]
        self.target_hidden_size, self.target_num_hidden_layers = target_hidden_size, target_num_hidden_layers
        self.target_vocab_size, self.target_name_or_path, self.target_model_type = target_vocab_size, None, None
        self.hidden_size, self.vocab_size = self.lm.get("hidden_size"), self.lm.get("vocab_size")
        self.draft_vocab_size = None
        self.decoding, self.head, self.backbone = decoding, head, backbone
        super().__init__(**kwargs)
        hf_specdec.models.registry.check_head(self)


class MaskLMDrafter(SavedDecoding, PreTrainedModel):
    config_class = MaskLMConfig
    main_input_name = "input_ids"

    def __init__(self, config: MaskLMConfig) -> None:
        super().__init__(config)
        self.lm = LlamaForCausalLM(LlamaConfig(**config.lm))
        self.draft_vocab = None
        self.post_init()
        hf_specdec.models.registry.build_head(self)

    @classmethod
    def for_target(cls, target) -> MaskLMDrafter:
        torch.manual_seed(5)
        text = target.config
        config = MaskLMConfig(
            lm=lm_fields(48),
            target_hidden_size=text.hidden_size,
            target_num_hidden_layers=text.num_hidden_layers,
            target_vocab_size=text.vocab_size,
        )
        return cls(config).eval()

    def get_input_embeddings(self) -> nn.Module:
        return self.lm.get_input_embeddings()

    def forward(self, input_ids: torch.LongTensor) -> torch.Tensor:
        """(1, S) ids -> (1, S, H) last hidden states of the causal LM."""
        return self.lm.model(input_ids=input_ids).last_hidden_state


class MaskLMGenerator(BlockDraftCandidateGenerator):
    """Each step: [committed tokens, MASK x (K-1)] through the LM; the output at the anchor and at each mask is a
    slot's state, scored by the LM's own head. It needs no target features."""

    def bind_scoring(self, drafter: MaskLMDrafter, target) -> None:
        self.embed = drafter.get_input_embeddings()
        self.draft_vocab = None
        self.head_weight, self.head_bias = drafter.lm.get_output_embeddings().weight, None
        self.cache = None

    def _receive(self, model_outputs, num_committed: int) -> None:
        pass

    def queue_features(self, features: torch.Tensor) -> None:
        pass

    def draft_scores(self, input_ids, k):
        feed = torch.cat([input_ids, self.mask_ids], dim=-1)  # (1, T + K - 1)
        hidden = self.drafter(feed)[0, input_ids.shape[1] - 1 :][:k]  # (k, H)
        return hidden, F.linear(hidden, self.head_weight)

    def block_states(self, input_ids, k):
        hidden, scores = self.draft_scores(input_ids, k)
        return torch.cat([hidden[:1], hidden]), scores


hf_specdec.register_base(
    MaskLMDrafter,
    MaskLMGenerator,
    policy_class=BlockPolicy,
    card=KindCard("A test causal LM drafting with masks"),
    capabilities=hf_specdec.Capabilities(own_embeddings=True),
)


# ---- the third head: a learned offset to every slot's scores ----


@dataclass
class OffsetHeadConfig:
    rank: int = 4

    def check(self, base_config) -> None:
        if self.rank < 1:
            raise ValueError(f"rank must be >= 1, got {self.rank}")


class OffsetHead(hf_specdec.HeadModule):
    """offset_s = B (A h_s): (k, H) slot states -> (k, V) added to the base's scores."""

    calls = 0

    def __init__(self, shape: OffsetHeadConfig, base_config) -> None:
        super().__init__(shape, base_config)
        vocab = base_config.draft_vocab_size or base_config.vocab_size
        self.down = nn.Linear(base_config.hidden_size, shape.rank, bias=False)
        self.up = nn.Linear(shape.rank, vocab, bias=False)

    def init_weights(self) -> None:
        nn.init.normal_(self.up.weight, std=3.0)  # not zero: the head changes the drafts

    def scores(self, hidden: torch.Tensor, unary: torch.Tensor) -> torch.Tensor:
        OffsetHead.calls += 1
        dtype = self.down.weight.dtype
        return unary.float() + self.up(self.down(hidden.to(dtype))).float()


class OffsetProposals:
    def __init__(self, head: OffsetHead, generator) -> None:
        self.head, self.generator = head, generator

    def logq(self, input_ids, k, temperature=1.0):
        hidden, unary = self.generator.block_states(input_ids, k)  # (k + 1, H), (k, Vd)
        return torch.log_softmax(self.head.scores(hidden[1:], unary) / temperature, dim=-1)  # (k, Vd)

    def chain(self, input_ids, k):
        logq, index = self.logq(input_ids, k).max(dim=-1)
        return self.generator.full_ids(index), logq

    def greedy_tree(self, input_ids, k, budget, topk) -> DraftTree:
        logq = self.logq(input_ids, k)
        top = logq.topk(min(topk, logq.shape[-1]), dim=-1)
        return best_first_tree(top.values.tolist(), self.generator.full_ids(top.indices).tolist(), budget)

    def sampled_tree(self, input_ids, k, branches, logits_processor: LogitsProcessorList | None) -> DraftTree:
        q = self.logq(input_ids, k, call_temperature(logits_processor)).exp()  # (k, Vd)
        draws = torch.multinomial(q, branches, replacement=True)  # (k, branches)
        full = self.generator.full_vocab(q, 0.0)
        return DraftTree.sampled_chain(self.generator.full_ids(draws).tolist(), full.to(input_ids.device))


class OffsetPolicy(BlockPolicy):
    def scores(self, hidden, logits, anchor_ids):
        return torch.log_softmax(self.head.scores(hidden[:, 1:], logits[:, 1:]) / self.temperature, dim=-1)


hf_specdec.register_head(
    hf_specdec.DrafterHead(
        name="offset",
        config_class=OffsetHeadConfig,
        module_class=OffsetHead,
        proposals_class=OffsetProposals,
        policy_class=OffsetPolicy,
        card=KindCard("Its offset head shifts every slot's scores.", tags=("offset",)),
        attr="offset_head",
    )
)


# ---- the checks ----


def pard(target) -> PardDrafter:
    torch.manual_seed(2)
    lm = LlamaForCausalLM(LlamaConfig(**lm_fields(32))).eval()
    return PardDrafter.from_causal_lm(lm, target, mask_token_id=MASK_ID, block_size=BLOCK)


BASES = {
    "mask-lm": MaskLMDrafter.for_target,
    "block": lambda target: make_drafter(target, BLOCK),
    "pard": pard,
}
HEADS = {"dcoco": {"corrector_candidates": 6}, "dblast": {"mixture_components": 3, "mixture_rank": 4}, "offset": {}}
PAIRS = [("mask-lm", head) for head in (None, "dcoco", "dblast", "offset")]
PAIRS += [(base, "offset") for base in ("block", "pard")]


def drafter_for(target, base: str, head: str | None):
    drafter = BASES[base](target)
    if head is not None:
        torch.manual_seed(4)
        drafter = hf_specdec.attach_head(drafter, head, **HEADS[head])
    return drafter.eval()


@pytest.mark.parametrize("base,head", PAIRS)
def test_generate_batch_and_server_equal_plain_greedy(base, head):
    target = tiny_target("llama")
    drafter = drafter_for(target, base, head)
    prompts = [torch.randint(3, VOCAB - 1, (n,), generator=torch.Generator().manual_seed(n)) for n in (9, 13)]
    plain = target.generate(prompts[0][None], max_new_tokens=NEW_TOKENS, do_sample=False)
    before = OffsetHead.calls
    for settings in (
        DecodingSettings(budget="fixed"),  # a chain: transformers' assisted loop
        DecodingSettings(budget="fixed", tree_budget=6, tree_topk=2),  # a tree: hf_specdec's loop
        DecodingSettings(budget="fixed", prompt_lookup_tokens=3),
    ):
        drafter.decoding = settings
        out = target.generate(prompts[0][None], max_new_tokens=NEW_TOKENS, do_sample=False, assistant_model=drafter)
        assert torch.equal(out, plain), settings
        assert drafter.last_acceptance_stats.verify_forwards > 0
    if head == "offset":
        assert OffsetHead.calls > before  # the head, not the base alone, drafted
    drafter.decoding = DecodingSettings(budget="fixed")
    assert_batch_and_server_equal_plain(target, drafter, prompts, NEW_TOKENS)


@pytest.mark.parametrize("base,head", PAIRS[1:])
def test_the_head_reaches_its_base_seam_and_policy(base, head):
    target = tiny_target("llama")
    drafter = drafter_for(target, base, head)
    assert hf_specdec.head_of(drafter).name == head and type(drafter) is type(BASES[base](target))
    generator = hf_specdec.models.registry.generator_class_for(drafter)(drafter, target, GenerationConfig())
    assert type(generator.head).__name__.lower().startswith(head)
    policy = policy_for(drafter, generator.embed, 1.0, torch.arange(VOCAB))
    assert type(policy) is hf_specdec.models.registry.head_named(head).policy_class


@pytest.mark.parametrize("base", ["block", "pard", "mask-lm"])
def test_the_new_head_saves_and_loads_on_every_base(base, tmp_path):
    target = tiny_target("llama")
    drafter = drafter_for(target, base, "offset")
    drafter.save_pretrained(tmp_path / "whole")
    loaded = hf_specdec.load_drafter(tmp_path / "whole")
    assert hf_specdec.head_of(loaded).name == "offset"
    torch.testing.assert_close(loaded.offset_head.up.weight, drafter.offset_head.up.weight)
    prompt = torch.randint(3, VOCAB - 1, (1, 10), generator=torch.Generator().manual_seed(1))
    plain = target.generate(prompt, max_new_tokens=12, do_sample=False)
    loaded.decoding = DecodingSettings(budget="fixed")
    assert torch.equal(target.generate(prompt, max_new_tokens=12, do_sample=False, assistant_model=loaded), plain)


def test_a_head_refuses_a_shape_it_does_not_have_and_a_second_head():
    target = tiny_target("llama")
    base = make_drafter(target, BLOCK)
    with pytest.raises(TypeError, match="no setting"):
        hf_specdec.attach_head(base, "offset", width=3)
    with pytest.raises(ValueError, match="rank must be >= 1"):
        hf_specdec.attach_head(base, "offset", rank=0)
    with pytest.raises(ValueError, match="already carries"):
        hf_specdec.attach_head(hf_specdec.attach_head(base, "offset"), "dcoco")
    assert hf_specdec.head_of(base) is None  # attaching never changes the base it was given


def test_a_head_starts_with_its_own_budget_memory_not_its_bases():
    """The adaptive budget's acceptance counts are the drafter's own: a head attached after its base has drafted
    does not inherit (or share) what the base's drafts earned."""
    target = tiny_target("llama")
    base = make_drafter(target, BLOCK)
    prompt = torch.randint(3, VOCAB - 1, (1, 10), generator=torch.Generator().manual_seed(3))
    target.generate(prompt, max_new_tokens=8, do_sample=False, assistant_model=base)  # default: adaptive budget
    assert base.budget_memory is not None
    drafter = hf_specdec.attach_head(base, "offset")
    assert "budget_memory" not in vars(drafter) and "last_acceptance_stats" not in vars(drafter)
    target.generate(prompt, max_new_tokens=8, do_sample=False, assistant_model=drafter)
    assert drafter.budget_memory is not base.budget_memory

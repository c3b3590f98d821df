"""PARD drafting inside `generate()`: the block drafter's candidate generator with a causal LM as the drafter.

Per step (T committed tokens, the last one, the anchor, not yet seen by the target):
1) feed the committed tokens the drafter's cache lacks (anchor included), then K-1 mask tokens; positions run on
   from the cache (masks at T .. T+K-2); with feature injection, token t gets the target features of token t-1
   and every mask the anchor's;
2) score the outputs at the anchor and masks 1..k-1 with the drafter's own LM head: drafts 1..k;
3) crop the K-1 mask entries from the drafter's cache, which then holds exactly the T committed tokens.

Chains, best-first trees, prompt-lookup branches and exact-q samples come from the block drafter's generator,
which only needs `draft_scores`; verification, acceptance and commit are the speculative step's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import DynamicCache, GenerationConfig, LogitsProcessorList, PreTrainedModel, StoppingCriteriaList
from transformers.generation.stopping_criteria import EosTokenCriteria, MaxLengthCriteria

from ...verification.stats import AcceptanceStats
from ..block_drafter.generation_block_drafter import BlockDraftCandidateGenerator
from ..target_features import hidden_state_indices
from .modeling_pard import PardDrafter


class PardCandidateGenerator(BlockDraftCandidateGenerator):
    """Proposes `block_size - 1` drafts per target forward from one pass of a `PardDrafter` (deterministic argmax
    drafts in transformers' loop; trees and exact q in hf_specdec's)."""

    def __init__(
        self,
        drafter: PardDrafter,
        target: PreTrainedModel,
        generation_config: GenerationConfig,
        logits_processor: LogitsProcessorList | None = None,
        stopping_criteria: StoppingCriteriaList | None = None,
    ) -> None:
        config = drafter.config
        self.drafter = drafter
        self.layer_ids = list(config.target_layer_ids)
        self.model_kwargs_overrides = {"output_hidden_states": hidden_state_indices(self.layer_ids)}
        self.block_size = config.block_size
        self.max_length = generation_config.max_length
        self.logits_processor = logits_processor if logits_processor else None
        extra = [c for c in stopping_criteria or () if not isinstance(c, (MaxLengthCriteria, EosTokenCriteria))]
        self.stopping_criteria = StoppingCriteriaList(extra) if extra else None
        self.vocab_size = target.get_output_embeddings().weight.shape[0]
        lm_head = drafter.get_output_embeddings()
        # (Vd,) ids the drafter's head scores (its draft vocabulary), or None for every id the target has
        self.draft_vocab = None if drafter.draft_vocab is None else drafter.draft_vocab.to(lm_head.weight.device)
        self.head_weight = drafter.head_weight()[: self.vocab_size]  # (Vd, H): rows past the target's never win
        bias = lm_head.bias
        if bias is not None:
            bias = bias[: self.vocab_size] if self.draft_vocab is None else bias.index_select(0, self.draft_vocab)
        self.head_bias = bias
        self.cache = DynamicCache()
        self.inject = drafter.feature_proj is not None
        self.features: torch.Tensor | None = None  # (1, C, L*H) target features of committed tokens (injection)
        self.pending = None
        self.context_rows = 0  # committed tokens whose features are in `self.features`
        self.mask_ids = torch.full(
            (1, self.block_size - 1), config.mask_token_id, dtype=torch.long, device=drafter.device
        )
        self.stats = AcceptanceStats(block_size=self.block_size)
        self._drafted: int | None = None
        drafter.last_acceptance_stats = self.stats

    def _receive(self, model_outputs, num_committed: int) -> None:
        """Keep the tapped features of tokens committed since the last call (only with feature injection)."""
        if not self.inject:
            return
        super()._receive(model_outputs, num_committed)
        self._keep_pending()

    def queue_features(self, features: torch.Tensor) -> None:
        if self.inject:
            super().queue_features(features)
            self._keep_pending()

    def _keep_pending(self) -> None:
        new = self.pending.to(device=self.drafter.device, dtype=self.drafter.dtype)
        self.features = new if self.features is None else torch.cat([self.features, new], dim=1)
        self.context_rows += new.shape[1]
        self.pending = None

    def draft_hidden(self, input_ids: torch.LongTensor) -> torch.Tensor:
        """One drafter pass; returns (1, K, H) outputs at `[anchor, MASK x (K-1)]` (row i predicts draft i + 1)."""
        device = self.drafter.device
        cached, T = self.cache.get_seq_length(), input_ids.shape[1]
        new = input_ids[:, cached:].to(device)  # (1, T - cached): committed tokens the cache lacks, anchor last
        feed = torch.cat([new, self.mask_ids], dim=-1)  # (1, S)
        positions = torch.arange(cached, T + self.block_size - 1, device=device)[None]  # (1, S)
        out = self.drafter(
            feed, position_ids=positions, past_key_values=self.cache, features=self._aligned(cached, T), use_cache=True
        )
        self.cache.crop(-(self.block_size - 1))  # drop the mask entries: the cache holds the T committed tokens
        return out.last_hidden_state[:, -self.block_size :]

    def _aligned(self, cached: int, T: int) -> torch.Tensor | None:
        """(1, S, L*H) features of the token before each fed slot (zeros before the first; masks get the anchor's)."""
        if not self.inject or self.features is None:
            return None
        known = self.features[:, : T - 1]  # (1, <=T-1, L*H) features of tokens 1..T-1
        width = known.shape[-1]
        prev = torch.cat([known.new_zeros(1, 1, width), known], dim=1)[:, cached:T]  # (1, T - cached, L*H)
        if prev.shape[1] < T - cached:  # features not received (e.g. steps the budget ran plain)
            prev = torch.cat([prev, prev.new_zeros(1, T - cached - prev.shape[1], width)], dim=1)
        return torch.cat([prev, prev[:, -1:].expand(-1, self.block_size - 1, -1)], dim=1)

    def draft_scores(self, input_ids: torch.LongTensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(k, H) outputs that predict drafts 1..k and (k, Vd) their scores by the drafter's LM head."""
        hidden = self.draft_hidden(input_ids)[0, :k]  # (k, H)
        return hidden, F.linear(hidden, self.head_weight, self.head_bias)


__all__ = ["PardCandidateGenerator"]

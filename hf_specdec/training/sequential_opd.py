"""Sequential on-policy distillation, the baseline SpecOPD is measured against (docs/specopd.md section 5).

Real speculative decoding with the current drafter, supervised as it goes: from a point of the trunk, each round
  1. drafts a block (the drafter's greedy path, as greedy decoding would),
  2. verifies it with ONE target forward on the KV cache (the teacher p of every drafted token),
  3. adds the E2E-TV loss of that block (same policy q and loss as SpecOPD),
  4. commits the accepted tokens and the target's bonus token (greedy acceptance), and goes on from there.
So one target forward supervises at most k tokens; SpecOPD's packed pass supervises n * M * k.
"""

from __future__ import annotations

import inspect

import torch
from transformers.cache_utils import DynamicCache

from ..models.target_features import drafter_layer_ids, tapped_features
from .data import TrainingSequence
from .losses import expected_verified_length_loss
from .proposal_trees import alive_after_eos
from .specopd import SpecOPDTrainer


class SequentialOPDTrainer(SpecOPDTrainer):
    """Draft, verify, commit, supervise: `rollout_rounds` speculative steps per sequence per optimizer step."""

    objective = "sequential_opd"
    loss_term_names = ()  # the loss is E2E-TV alone

    def sequence_loss(self, seq: TrainingSequence, rng: torch.Generator) -> tuple[torch.Tensor, int]:
        cfg, target, dev = self.config, self.target, self.device
        K, layers = self.drafter.config.block_size, drafter_layer_ids(self.drafter.config, self.target.config)
        T = seq.ids.shape[0]
        cache_arg = "cache" if "cache" in inspect.signature(target.forward).parameters else "past_key_values"
        low = max(seq.loss_start, 2)
        start = int(torch.randint(low, max(low + 1, T), (1,), generator=rng))
        cache = DynamicCache()
        with torch.no_grad(), self.timed("target_seconds"):  # prefill all but the last token (fed with the drafts)
            prefix = seq.ids[None, : start - 1].to(target.device)
            out = target(prefix, **{cache_arg: cache}, use_cache=True, output_hidden_states=True)
        features = tapped_features(out.hidden_states, layers, start - 1)  # (1, C, L*H)
        pending, length = seq.ids[start - 1 : start], start - 1
        losses, supervised = [], 0
        for _ in range(cfg.rollout_rounds):
            # 1) draft from the committed context
            block = torch.full((1, K), self.drafter.config.mask_token_id, dtype=torch.long)
            block[0, 0] = pending[0]
            noise = self.embed(block.to(self.embed.weight.device)).to(dev, self.drafter.dtype)  # (1, K, H)
            positions = torch.arange(length + K, device=dev)[None]
            hidden = self.drafter(
                noise_embeds=noise, target_features=features.to(dev, self.drafter.dtype), position_ids=positions
            ).last_hidden_state  # (1, K, H)
            logits = self.slot_logits(hidden)  # (1, K, Vd)
            scores = self.policy.scores(hidden, logits, pending.to(dev))
            tokens = self.policy.draw(scores, 1, rng).cpu()  # (1, 1, k) the greedy path
            drafts = self.full_ids(tokens)[0, 0]  # (k,)
            # 2) verify: one target forward on the cache
            with torch.no_grad(), self.timed("target_seconds"):
                fed = torch.cat([pending, drafts])[None].to(target.device)  # (1, K)
                out = target(fed, **{cache_arg: cache}, use_cache=True, output_hidden_states=True)
                row_logits = out.logits[0].float()  # (K, V)
                probs = torch.softmax(row_logits[:-1] / cfg.temperature, dim=-1)  # (k, V) p of each drafted token
            vocab = self.drafter.draft_vocab
            p = (probs if vocab is None else probs[:, vocab.to(probs.device)]).to(dev)  # (k, Vd)
            # 3) supervise
            q = self.policy.path_q(scores, tokens.to(dev))[0]  # (1, k, Vd)
            valid = alive_after_eos(drafts[None], self.eos).to(dev)
            losses.append(expected_verified_length_loss(p[None], q, valid))
            supervised += int(valid.sum())
            # 4) commit the accepted drafts and the bonus token
            choice = row_logits.argmax(dim=-1).cpu()  # (K,)
            accepted = int((drafts == choice[:-1]).long().cumprod(0).sum())
            new = tapped_features(out.hidden_states, layers, accepted + 1).to(features.device)  # (1, j+1, L*H)
            features = torch.cat([features, new], dim=1)
            length += accepted + 1
            cache.crop(-(K - accepted - 1))  # drop the rejected drafts' rows (transformers 5: a count to remove)
            pending = choice[accepted : accepted + 1]
            self.state["target_tokens"] += K
            self.state["target_passes"] += 1
            self.state["branch_tokens"] += K - 1
            if bool(torch.isin(pending, self.eos)) or length + 2 * K >= cfg.max_length:
                break
        return torch.stack(losses).mean(), supervised


__all__ = ["SequentialOPDTrainer"]

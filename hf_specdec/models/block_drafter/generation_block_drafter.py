"""Block drafting inside transformers' assisted-generation loop.

`BlockDraftCandidateGenerator` is a transformers `CandidateGenerator` that uses the loop's
`requires_model_outputs` protocol: every verification forward of the target also returns the hidden states of
the drafter's tapped layers, and the generator feeds the drafter the rows of exactly the tokens that were
committed. The stock loop does the rest (verification, cache rollback, EOS and length handling, streamers,
output format), so a drafted `generate()` behaves like a plain one.

Per step (T committed tokens, the last one, the "anchor", not yet seen by the target):
1) take the target features of the rows committed since the last step (one per newly committed token but the anchor),
2) one drafter pass over `[anchor, MASK x (K-1)]` with those rows as new context,
3) score positions 1..k with the target's LM head on a 2-D input, pick argmax drafts (k <= K-1, capped by max_length).

A head on the drafter (`models/attach.py`) reads `block_states` and proposes instead (`self.head`): its chain, its
trees and its exact-q samples. The PARD base's generator builds on this one.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import GenerationConfig, LogitsProcessorList, PreTrainedModel, StoppingCriteriaList
from transformers.generation.candidate_generator import CandidateGenerator

from ...verification.processed import history_free, probabilities, process_rows, sample
from ...verification.stats import AcceptanceStats
from ...verification.stopping import extra_stopping_criteria
from ...verification.tree import DraftTree, best_first_tree
from ..lm_head_strides import fix_lm_head_strides
from ..registry import head_proposals
from ..target_features import drafter_layer_ids, hidden_state_indices, tapped_features
from .modeling_block_drafter import BlockDrafter, DraftContextCache


class BlockDraftCandidateGenerator(CandidateGenerator):
    """Proposes a block of argmax drafts per target forward from a `BlockDrafter`.

    Drafts are deterministic, so the loop's sample-and-match verification is exactly lossless when sampling
    (each emitted token is a sample of the target's processed distribution) and greedy output equals plain
    greedy decoding.
    """

    requires_model_outputs = True

    def __init__(
        self,
        drafter: BlockDrafter,
        target: PreTrainedModel,
        generation_config: GenerationConfig,
        logits_processor: LogitsProcessorList | None = None,
        stopping_criteria: StoppingCriteriaList | None = None,
    ) -> None:
        self.drafter = drafter
        self.layer_ids = self.target_layers(drafter, target)  # 0-based, in the drafter's order ([]: reads none)
        self.model_kwargs_overrides = {"output_hidden_states": hidden_state_indices(self.layer_ids) or False}
        self.block_size = drafter.config.block_size
        self.max_length = generation_config.max_length
        self.logits_processor = logits_processor if logits_processor else None
        # The loop truncates at EOS and max_length itself; other criteria are honoured by capping drafts.
        self.stopping_criteria = extra_stopping_criteria(stopping_criteria)
        self.vocab_size = target.get_output_embeddings().weight.shape[0]
        self.bind_scoring(drafter, target)
        self.context_rows = 0  # committed tokens whose target features are in the drafter's cache
        self.pending: torch.Tensor | None = None  # (1, C, L*H) features received but not fed yet
        self.mask_ids = torch.full(
            (1, self.block_size - 1), drafter.config.mask_token_id, dtype=torch.long, device=self.embed.weight.device
        )
        self.stats = AcceptanceStats(block_size=self.block_size)
        self.copying = False  # the row's last step accepted a prompt-lookup node (set by the step before drafting)
        self._drafted: int | None = None  # drafts proposed for the forward in flight; None = prefill
        drafter.last_acceptance_stats = self.stats
        self.head = head_proposals(drafter, self)  # the drafter's head reading this generator, or None

    def target_layers(self, drafter: BlockDrafter, target: PreTrainedModel) -> list[int]:
        """The target layers whose outputs every verify forward returns to the drafter (a block drafter's taps)."""
        return drafter_layer_ids(drafter.config, target.config)

    def bind_scoring(self, drafter: BlockDrafter, target: PreTrainedModel) -> None:
        """What the drafter embeds and scores with, and its cache: the target's embeddings and LM head rows."""
        self.embed = target.get_input_embeddings()
        lm_head = target.get_output_embeddings()
        fix_lm_head_strides(target)
        # (Vd,) ids the drafter scores, or None for the whole vocabulary; moved and gathered once per call
        self.draft_vocab = None if drafter.draft_vocab is None else drafter.draft_vocab.to(lm_head.weight.device)
        self.head_weight = drafter.head_weight(lm_head)  # (Vd, H)
        self.head_bias = lm_head.bias
        if self.head_bias is not None and self.draft_vocab is not None:
            self.head_bias = self.head_bias[self.draft_vocab]
        self.cache = DraftContextCache()

    def get_candidates(
        self,
        input_ids: torch.LongTensor,
        model_kwargs: dict | None = None,
        model_outputs=None,
        is_first_iteration: bool = False,
        n_last_matches: int = 0,
        **kwargs,
    ) -> tuple[torch.LongTensor, torch.FloatTensor | None]:
        if is_first_iteration:  # the target has not run yet: let it prefill and emit the first token
            self._drafted = None
            return input_ids, None
        self._receive(model_outputs, input_ids.shape[1])
        k = min(self.block_size - 1, self.max_length - input_ids.shape[1] - 1)
        if k <= 0:
            self._drafted = 0
            return input_ids, None
        drafts, draft_logits = self.propose(input_ids, k)
        if self.stopping_criteria is not None:
            drafts, draft_logits = self._stop_before_criteria(input_ids, drafts, draft_logits)
        self._drafted = drafts.shape[1]
        return torch.cat([input_ids, drafts], dim=-1), draft_logits

    def _stop_before_criteria(self, input_ids, drafts, draft_logits):
        """Drop drafts from the first one that would end generation on its own.

        Plain generate stops right after such a token; here it could be followed by accepted drafts and a
        bonus token. Without it, the stop can only land on the last committed token, exactly where plain
        generate stops. (One host sync per draft; only when the call has extra stopping criteria.)
        """
        for j in range(drafts.shape[1]):
            if self.stopping_criteria(torch.cat([input_ids, drafts[:, : j + 1]], dim=-1), None).any():
                return drafts[:, :j], None if draft_logits is None else draft_logits[:, :j]
        return drafts, draft_logits

    def update_candidate_strategy(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, num_matches: int):
        if self._drafted is None:
            self.stats.prefill_forwards += 1
        else:
            self.stats.record(self._drafted, num_matches)

    def _receive(self, model_outputs, num_committed: int) -> None:
        """Queue the tapped features of tokens committed since the last call (all but the anchor)."""
        if model_outputs is None or getattr(model_outputs, "hidden_states", None) is None:
            raise RuntimeError("the target forward returned no hidden states; the drafter cannot condition on it")
        queued = 0 if self.pending is None else self.pending.shape[1]
        rows = num_committed - 1 - self.context_rows - queued
        new = tapped_features(model_outputs.hidden_states, self.layer_ids, rows)  # (1, rows, L*H)
        self.pending = new if self.pending is None else torch.cat([self.pending, new], dim=1)

    def queue_features(self, features: torch.Tensor) -> None:
        """Queue (1, C, L*H) tapped target features of newly committed tokens (hf_specdec's own loop)."""
        self.pending = features if self.pending is None else torch.cat([self.pending, features], dim=1)

    def draft_hidden(self, input_ids: torch.LongTensor) -> torch.Tensor:
        """One drafter pass; returns (1, K, H) hidden states of `[anchor, MASK x (K-1)]`."""
        device = self.drafter.device
        features = self.pending.to(device=device, dtype=self.drafter.dtype)  # (1, C, L*H)
        n_ctx, T = features.shape[1], input_ids.shape[1]
        block_ids = torch.cat([input_ids[:, -1:], self.mask_ids], dim=-1)  # (1, K)
        positions = torch.arange(T - 1 - n_ctx, T - 1 + self.block_size, device=device)[None]  # (1, C + K)
        out = self.drafter(  # the target's embeddings and features in the drafter's dtype (a bf16 drafter, fp32 target)
            noise_embeds=self.embed(block_ids).to(device=device, dtype=self.drafter.dtype),
            target_features=features,
            position_ids=positions,
            cache=self.cache,
        )
        self.context_rows += n_ctx
        self.pending = None
        return out.last_hidden_state

    def draft_scores(self, input_ids: torch.LongTensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One drafter pass: (k + 1, H) hidden states of the anchor and slots 1..k, and (k, Vd) their scores by the
        target's LM head over the draft vocabulary (2-D input: the fast CPU path)."""
        hidden = self.draft_hidden(input_ids)[0, : k + 1]  # (k + 1, H), the drafter's dtype
        head = self.head_weight  # (Vd, H), the target's dtype
        return hidden, F.linear(hidden[1:].to(device=head.device, dtype=head.dtype), head, self.head_bias)

    def block_states(self, input_ids: torch.LongTensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """What a head on top of the drafter (DCOCO's corrector, DBLAST's mixture) reads: (k + 1, H) states of the
        anchor and of drafted slots 1..k, and (k, Vd) the slots' scores. A block drafter's are its own slots'."""
        return self.draft_scores(input_ids, k)

    def draft_logits(self, input_ids: torch.LongTensor, k: int) -> torch.Tensor:
        """(k, Vd) scores of block positions 1..k over the draft vocabulary."""
        return self.draft_scores(input_ids, k)[1]

    def full_ids(self, index: torch.LongTensor) -> torch.LongTensor:
        """Full-vocabulary ids of draft-vocabulary indices."""
        return index if self.draft_vocab is None else self.draft_vocab.to(index.device)[index]

    def full_vocab(self, rows: torch.Tensor, fill: float) -> torch.Tensor:
        """(k, V) from (k, Vd): ids outside the draft vocabulary get `fill` (the drafter never proposes them); a
        drafter with its own, smaller vocabulary (PARD for a target with more ids) gets the missing ids filled."""
        if self.draft_vocab is None:
            missing = self.vocab_size - rows.shape[-1]
            return rows if missing <= 0 else torch.cat([rows, rows.new_full((rows.shape[0], missing), fill)], -1)
        full = rows.new_full((rows.shape[0], self.vocab_size), fill)
        return full.index_copy_(1, self.draft_vocab.to(rows.device), rows)

    def full_vocab_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """(k, V) from (k, Vd) scores, -inf outside the draft vocabulary."""
        return self.full_vocab(logits, float("-inf"))

    def chain(self, input_ids: torch.LongTensor, k: int) -> tuple[torch.LongTensor, torch.Tensor | None]:
        """The argmax chain, written once for transformers' loop (`propose`) and hf_specdec's (`greedy_tree` with no
        tree budget): (k,) full-vocabulary ids and (k,) their log q (None where the proposer has no such score)."""
        if self.head is not None:
            return self.head.chain(input_ids, k)
        logq, index = self.draft_logits(input_ids, k).float().log_softmax(dim=-1).max(dim=-1)  # (k,) each
        return self.full_ids(index), logq

    def propose(self, input_ids: torch.LongTensor, k: int) -> tuple[torch.LongTensor, torch.FloatTensor | None]:
        """(1, k) argmax drafts (after the logits processors, for a base without a head); None logits selects
        sample-and-match."""
        if self.logits_processor is None or self.head is not None:
            return self.chain(input_ids, k)[0][None].to(input_ids.device), None
        logits = self.full_vocab_logits(self.draft_logits(input_ids, k))  # processors work on full-vocabulary rows
        ids = input_ids
        for j in range(k):  # processors may depend on the tokens drafted before position j
            row = self.logits_processor(ids, logits[j : j + 1].float().to(input_ids.device))  # (1, V)
            ids = torch.cat([ids, row.argmax(dim=-1, keepdim=True)], dim=-1)
        return ids[:, input_ids.shape[1] :], None

    # Proposals for hf_specdec's own loop (trees, exact-q sampling); a head on the drafter proposes instead.

    def greedy_tree(self, input_ids: torch.LongTensor, k: int, budget: int, topk: int) -> DraftTree:
        """Deterministic drafts: the argmax chain (budget 0) or a best-first tree of `budget` nodes (DDTree)."""
        if not budget:
            return chain_tree(*self.chain(input_ids, k))
        if self.head is not None:
            return self.head.greedy_tree(input_ids, k, budget, topk)
        logits = self.draft_logits(input_ids, k).float()  # (k, Vd)
        logq, index = logits.log_softmax(dim=-1).topk(min(topk, logits.shape[-1]), dim=-1)  # (k, width) each
        return best_first_tree(logq.tolist(), self.full_ids(index).tolist(), budget)

    @staticmethod
    def chooses_sampled_blocks(drafter, settings) -> bool:
        """Whether the drafter chooses each sampled block's way itself, plain steps included; a kind that does
        (PARD, `models/pard/ar_choice.py`) says so. This one does not."""
        return False

    @staticmethod
    def sampled_blocks_whole(drafter, settings) -> bool:
        """Whether a drafter that chooses its sampled blocks also chose their lengths, so each is verified whole;
        this kind does not choose."""
        return False

    def most_drafts(self, sampled: bool) -> int:
        """The most drafts one step's tree may hold in depth: the block's `block_size - 1` (a kind whose sampled
        drafts can run past its block, PARD's dependent chains, says more)."""
        return self.block_size - 1

    def sampled_tree(
        self, input_ids: torch.LongTensor, k: int, branches: int, logits_processor: LogitsProcessorList | None
    ) -> DraftTree:
        """Drafts sampled from q_d = softmax(processed drafter scores at depth d): `branches` i.i.d. draws per depth.

        The first draw at each depth continues the chain; the others are leaves beside it. The tree carries the
        exact q every node was drawn from, for speculative sampling.
        """
        if self.head is not None:
            return self.head.sampled_tree(input_ids, k, branches, logits_processor)
        scores = self.full_vocab_logits(self.draft_logits(input_ids, k)).float().to(input_ids.device)  # (k, V)
        if history_free(logits_processor):
            q = probabilities(process_rows(logits_processor, scores, lambda r: input_ids))  # (k, V)
            draws = sample(q, branches)  # (k, branches)
        else:  # processors read the history: q_d depends on the chain drawn before depth d
            ids, rows, picks = input_ids, [], []
            for d in range(k):
                q_d = probabilities(logits_processor(ids, scores[d : d + 1]))  # (1, V)
                pick = sample(q_d, branches)  # (1, branches)
                ids = torch.cat([ids, pick[:, :1]], dim=-1)
                rows.append(q_d)
                picks.append(pick)
            q, draws = torch.cat(rows), torch.cat(picks)
        return DraftTree.sampled_chain(draws.tolist(), q)


def chain_tree(tokens: torch.LongTensor, logq: torch.Tensor | None) -> DraftTree:
    """A chain of (k,) tokens as a tree; with (k,) per-depth log q its nodes carry path scores (as a best-first
    tree's do: the adaptive budget reads them)."""
    if logq is not None:
        return best_first_tree([[v] for v in logq.tolist()], [[t] for t in tokens.tolist()], len(tokens))
    tree = DraftTree()
    for token in tokens.tolist():
        tree.add(token, len(tree) - 1)
    return tree


__all__ = ["BlockDraftCandidateGenerator", "chain_tree"]

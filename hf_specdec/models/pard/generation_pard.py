"""PARD drafting inside `generate()`: the block drafter's candidate generator with a causal LM as the drafter.

Per step (T committed tokens, the last one, the anchor, not yet seen by the target):
1) feed the committed tokens the drafter's cache lacks (anchor included), then K-1 mask tokens; positions run on
   from the cache (masks at T .. T+K-2); with feature injection, token t gets the target features of token t-1
   and every mask the anchor's;
2) score the outputs at the anchor and masks 1..k-1 with the drafter's own LM head: drafts 1..k;
3) crop the K-1 mask entries from the drafter's cache, which then holds exactly the T committed tokens.

Chains, best-first trees, prompt-lookup branches and exact-q samples come from the block drafter's generator,
which only needs `draft_scores`; verification, acceptance and commit are the speculative step's.

Sampled blocks with `DecodingSettings.sampled_ar_drafts = m > 1` (`sampled_tree`): the drafter is a causal LM, so
drafts 1..m are sampled one pass each, pass d feeding draft d-1 (and, on pass m, masks for the rest); draft d's q
is the LM's conditional given the drafts before it, drafts after m come from pass m's mask slots (given drafts
1..m-1). Afterwards the cache is cropped back to the committed tokens. With the adaptive budget m is chosen per
block among 1..`sampled_ar_drafts` by the committed tokens per second each realized (`ar_choice.py`). With
`sampled_base_drafts` a block may instead be a chain from the drafter's base LM (`base_chain.py`): every block with
budget "fixed", one more choice with "auto". Greedy blocks with `DecodingSettings.greedy_base_drafts` may likewise
be the base LM's argmax chain (`BaseChain.greedy_chain`, `greedy_tree`).

In a batch, `draft_rows` runs step 1 for every drafting row in ONE drafter pass: each row's fed tokens are
left-padded to one width, its cache left-padded to one length, and a (B, W, C + W) mask lets a row see only its own
slots (rows whose lengths differ much, e.g. one catching up on its prompt, get passes of their own). Afterwards
each row's cache is cut back out (its committed tokens only) and its outputs wait for its `draft_scores`, so the
rest of the step runs per row as before. A drafter pass over 8 tokens costs about the same
for 1 row as for 4 on a CPU, so this is what lets a batch afford drafting.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from transformers import DynamicCache, GenerationConfig, LogitsProcessorList, PreTrainedModel, StoppingCriteriaList

from ...verification.processed import probabilities, process_rows, sample
from ...verification.tree import DraftTree, mask_for_attention
from ..block_drafter.generation_block_drafter import BlockDraftCandidateGenerator
from ..int8_weights import int8_available
from ..padding import left_pad, length_groups
from ..registry import head_of
from .ar_choice import CATCH_UP, CLEARLY, ArChoice, choice_of, greedy_choice_of
from .base_chain import BaseChain
from .modeling_pard import PardDrafter


class PardCandidateGenerator(BlockDraftCandidateGenerator):
    """Proposes `block_size - 1` drafts per target forward from one pass of a `PardDrafter` (deterministic argmax
    drafts in transformers' loop; trees and exact q in hf_specdec's)."""

    chain_class = BaseChain  # what drafts base-LM chains

    def __init__(
        self,
        drafter: PardDrafter,
        target: PreTrainedModel,
        generation_config: GenerationConfig,
        logits_processor: LogitsProcessorList | None = None,
        stopping_criteria: StoppingCriteriaList | None = None,
    ) -> None:
        super().__init__(drafter, target, generation_config, logits_processor, stopping_criteria)
        self.inject = drafter.feature_proj is not None
        self.features: torch.Tensor | None = None  # (1, C, L*H) target features of committed tokens (injection)
        self.ready: tuple[int, torch.Tensor, torch.Tensor] | None = None  # (T, (K, H), (K-1, Vd)) from draft_rows
        settings = drafter.decoding
        # only the settings of this call's way of drafting apply: a greedy call never builds (nor times the int8
        # copies of) the sampled chains' base LM, a sampled one never drafts greedy chains
        sampled = bool(generation_config.do_sample) and settings.sampled_drafts == "exact"
        self.ar_drafts = settings.sampled_ar_drafts  # sampled drafts that get a drafter pass each (at most, "auto")
        self.ar_stop = settings.sampled_ar_stop  # a dependent block ends after a draft of q below this
        self.base_drafts = settings.sampled_base_drafts if sampled else 0  # a base-LM chain's drafts at most (0: none)
        self.base_branches = settings.sampled_base_branches  # i.i.d. base-LM chains per block, merged
        self.greedy_base = 0 if sampled else settings.greedy_base_drafts  # a greedy base-LM chain's drafts at most
        self.base_chain = None
        if self.base_drafts or self.greedy_base:
            if drafter.base_lm is None:
                name = "sampled_base_drafts" if self.base_drafts else "greedy_base_drafts"
                raise ValueError(
                    f"{name} needs the drafter's base LM weights (`base_lm`), and this drafter holds "
                    f"none: load it from an adapter folder whose saved decoding sets {name} (or with "
                    "`PardDrafter.from_adapter_folder(folder, keep_base=True)`), call `drafter.attach_base_lm(lm)`, "
                    f"or set {name}=0"
                )
            base = drafter.base_lm
            if base.device != drafter.device or base.dtype != drafter.dtype:  # the drafter was moved after load
                base.to(device=drafter.device, dtype=drafter.dtype)
            weights = settings.sampled_base_weights  # "auto": int8 for the passes it times faster on this machine
            int8 = 0.0  # the widest pass (tokens fed) run through int8 copies
            if int8_available(drafter.device) and weights == "int8":
                int8 = float("inf")
            elif int8_available(drafter.device) and weights == "auto":
                int8 = drafter.base_int8_widest(self.head_weight, self.head_bias)
            stop, stop_on = settings.sampled_base_stop, settings.sampled_base_stop_on
            self.base_chain = self.chain_class(base, self, stop, settings.sampled_base_topk, int8, stop_on)
        # the adaptive budget also picks that count (or a base-LM chain) per step (ar_choice.py); None: the setting
        adaptive = sampled and settings.budget == "auto" and (self.ar_drafts > 1 or self.base_drafts > 0)
        self.ar_choice = choice_of(drafter, self.ar_drafts, self.base_drafts > 0) if adaptive else None
        if self.ar_choice is not None and self.base_drafts and self._chains_cannot_pay():
            self.ar_choice.rule_out("base")
        # greedy blocks: the adapter's tree or a base-LM chain, chosen per block (budget "auto"; "fixed": chains)
        self.greedy_choice = greedy_choice_of(drafter) if settings.budget == "auto" and self.greedy_base else None
        self.by_copying = settings.sampled_choice_context == "copying"  # rows copying a span choose apart
        # (choice, start seconds, row steps then, its tree, the memory it was chosen from) of the last block
        self.ar_step: tuple[int | str, float, int, DraftTree | None, ArChoice] | None = None
        self.caught_up = 0  # committed tokens the last block's first drafter pass read (its catch-up)
        self.read_prompt = False  # ... and that pass read the prompt (its cache was empty)

    def target_layers(self, drafter: PardDrafter, target: PreTrainedModel) -> list[int]:
        """The listed target layers with feature injection (PARD-2); none without: PARD reads only tokens."""
        return super().target_layers(drafter, target) if drafter.feature_proj is not None else []

    def bind_scoring(self, drafter: PardDrafter, target: PreTrainedModel) -> None:
        """The drafter's own embeddings and LM head rows, and a causal LM's KV cache."""
        lm_head = drafter.get_output_embeddings()
        self.embed = drafter.get_input_embeddings()  # token embeddings in the drafter's width (what heads read)
        # (Vd,) ids the drafter's head scores (its draft vocabulary), or None for every id the target has
        self.draft_vocab = None if drafter.draft_vocab is None else drafter.draft_vocab.to(lm_head.weight.device)
        self.head_weight = drafter.head_weight()[: self.vocab_size]  # (Vd, H): rows past the target's never win
        bias = lm_head.bias
        if bias is not None:
            bias = bias[: self.vocab_size] if self.draft_vocab is None else bias.index_select(0, self.draft_vocab)
        self.head_bias = bias
        self.cache = DynamicCache()

    def known(self, ids: torch.LongTensor) -> torch.LongTensor:
        """`ids` with the target's ids past the drafter's embeddings (a target with more ids than the drafter, which
        it never emits when it shares the drafter's tokenizer) read as the mask token: never an index error."""
        rows = self.embed.num_embeddings
        return torch.where(ids < rows, ids, self.mask_ids[0, 0])

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
        ready = self._take_ready(input_ids)
        if ready is not None:
            return ready[0][None]
        device = self.drafter.device
        cached, T = self.cache.get_seq_length(), input_ids.shape[1]
        self.caught_up = max(self.caught_up, T - cached)  # committed tokens this pass reads (`_ar_count`)
        self.read_prompt = self.read_prompt or cached == 0
        new = self.known(input_ids[:, cached:].to(device))  # (1, T - cached): tokens the cache lacks, anchor last
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
        ready = self._take_ready(input_ids)
        if ready is not None:
            return ready[0][:k], ready[1][:k]
        hidden = self.draft_hidden(input_ids)[0, :k]  # (k, H)
        return hidden, F.linear(hidden, self.head_weight, self.head_bias)

    def block_states(self, input_ids: torch.LongTensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(k + 1, H) states a head reads (`models/attach.py`) and (k, Vd) draft scores. A
        causal LM's output at a position both ends its token and predicts the next, so the anchor's state is the
        output at the anchor and slot s's is the output that predicts it: the anchor's again for slot 1, mask
        s - 1's after."""
        hidden, scores = self.draft_scores(input_ids, k)  # (k, H), (k, Vd)
        return torch.cat([hidden[:1], hidden]), scores

    def most_drafts(self, sampled: bool) -> int:
        """A dependent sampled chain runs past the block: `sampled_ar_drafts` drafts of their own passes, then the
        last pass's `block_size - 2` mask slots, and so do base-LM chains (`sampled_base_drafts`,
        `greedy_base_drafts`); greedy trees, heads and parallel blocks keep the block."""
        most = self.block_size - 1
        if not sampled and self.head is None and self.greedy_base:
            most = max(most, self.greedy_base)
        if sampled and self.head is None and self.ar_drafts > 1:
            most = self.ar_drafts + self.block_size - 2  # at least the block's block_size - 1 (ar_drafts >= 2)
        if sampled and self.head is None and self.base_drafts:
            most = max(most, self.base_drafts)
        return most

    def greedy_tree(self, input_ids: torch.LongTensor, k: int, budget: int, topk: int) -> DraftTree:
        """The adapter's argmax chain or best-first tree over its block, or with `greedy_base_drafts` a base-LM
        argmax chain of up to that many drafts (`BaseChain.greedy_chain`, verified whole): every block with budget
        "fixed", chosen per block by realized rates with "auto" (`ar_choice.py`)."""
        block = min(k, self.block_size - 1)
        if self.head is not None or not self.greedy_base:
            return super().greedy_tree(input_ids, block, budget, topk)
        way = self._judged_choice(self.greedy_choice) if self.greedy_choice is not None else "base"
        if way == "block":
            tree = super().greedy_tree(input_ids, block, budget, topk)
        else:
            self._base_block(input_ids)
            stop = self.drafter.decoding.greedy_base_stop
            tree = self.base_chain.greedy_chain(input_ids, min(k, self.greedy_base), stop)
        if self.ar_step is not None:
            self.ar_step = (*self.ar_step[:3], tree, self.ar_step[4])  # judged later: did the budget cut it?
        return tree

    def sampled_tree(
        self, input_ids: torch.LongTensor, k: int, branches: int, logits_processor: LogitsProcessorList | None
    ) -> DraftTree:
        """Drafts sampled from q_d with `branches` i.i.d. draws per depth (the first continues the chain); drafts
        1..m (m = `sampled_ar_drafts`) each from their own drafter pass given the drafts before them, the rest (at
        most `block_size - 2`, past the block when m is large) from pass m's mask slots. A draft before m drawn with
        q below `sampled_ar_stop` ends the block (one host read per pass: whether to pay for the next). With
        `sampled_base_drafts` the block may be a base-LM chain instead (`base_chain.py`). The tree carries the exact
        q every node was drawn from."""
        if self.head is not None:
            return super().sampled_tree(input_ids, k, branches, logits_processor)
        if self.base_chain is not None:
            self.base_chain.learn(self.stats)  # what the target kept of the last chain, when it was just verified
        tree = self._sampled_block(self._ar_count(), input_ids, k, branches, logits_processor)
        if self.ar_step is not None:
            self.ar_step = (*self.ar_step[:3], tree, self.ar_step[4])  # judged later: did the budget cut it?
        return tree

    @staticmethod
    def chooses_sampled_blocks(drafter: PardDrafter, settings) -> bool:
        """Whether this drafter's sampled blocks are chosen per block by what each way realized (`ar_choice.py`):
        the adaptive budget, with more than one way to draft and no head. The choice ("plain" included) then decides
        the call's plain steps; the budget cuts each block to the nodes worth verifying, or verifies it whole
        (`sampled_blocks_whole`)."""
        several = settings.sampled_ar_drafts > 1 or settings.sampled_base_drafts > 0
        return settings.budget == "auto" and several and head_of(drafter) is None

    @staticmethod
    def sampled_blocks_whole(drafter: PardDrafter, settings) -> bool:
        """Whether each chosen sampled block is verified whole: base-LM chains (then the choice is "base" or
        "plain"), whose own stop chose their length and whose passes are paid (`ar_choice.py`)."""
        return settings.sampled_base_drafts > 0

    def _sampled_block(
        self, m: int | str, input_ids: torch.LongTensor, k: int, branches: int, logits_processor
    ) -> DraftTree:
        """`sampled_tree` for this block's choice `m`: a base-LM chain ("base"), no drafts ("plain", no pass) or m
        drafts of their own passes."""
        if m == "plain":
            return DraftTree()
        if m == "base":
            self._base_block(input_ids)
            k = min(k, self.base_drafts)
            leaves = branches - 1  # `sample_branches`: side leaves beside every chain node
            return self.base_chain.sampled_tree(input_ids, k, self.base_branches, logits_processor, leaves)
        m = min(m, k)
        if m <= 1:
            return super().sampled_tree(input_ids, min(k, self.block_size - 1), branches, logits_processor)
        k = min(k, m + self.block_size - 2)  # pass m feeds draft m - 1 and masks for drafts m + 1 .. k
        T = input_ids.shape[1]
        hidden, first = self.draft_hidden(input_ids)[0], 0  # (K, H): row i predicts draft first + i + 1
        ids, rows, picks = input_ids, [], []
        for d in range(k):
            if 0 < d < m:  # pass d + 1 feeds draft d; the last one also feeds masks for drafts m + 1 .. k
                hidden, first = self._extend(ids[:, -1:], T, d, k - m if d == m - 1 else 0), d
            scores = F.linear(hidden[d - first : d - first + 1], self.head_weight, self.head_bias)  # (1, Vd)
            scores = self.full_vocab_logits(scores).float().to(input_ids.device)  # (1, V)
            q_d = probabilities(process_rows(logits_processor, scores, lambda r, ids=ids: ids))  # (1, V)
            pick = sample(q_d, branches)  # (1, branches)
            ids = torch.cat([ids, pick[:, :1]], dim=-1)
            rows.append(q_d)
            picks.append(pick)
            if d < m - 1 and self.ar_stop > 0 and float(q_d[0, pick[0, 0]]) < self.ar_stop:
                break  # the drafter doubts draft d + 1: the block ends there, no pass is paid after it
        if first:
            self.cache.crop(-first)  # drop the drafts fed (1..first): the cache holds the committed tokens only
        return DraftTree.sampled_chain(torch.cat(picks).tolist(), torch.cat(rows))

    def _chains_cannot_pay(self) -> bool:
        """Whether even a base-LM chain whose every draft is kept commits under `CLEARLY` more tokens per second
        than plain steps on this machine, for every length up to `sampled_base_drafts`: its verify priced on the
        target's measured cost curve (the adaptive budget's, `drafter.budget_memory.costs`, at sizes measured), its
        passes at the base LM's one-token pass as `base_int8_widest` timed it. There no chain can pay whatever the
        text, and trying and probing chains only costs (on an AVX2 EPYC in bf16, 9 fed tokens cost 1.47 s and a pass
        81 ms: a chain of 8 drafts always kept commits 4.2 tokens/s, plain steps 4.5-5). False while either is
        unknown."""
        costs = getattr(getattr(self.drafter, "budget_memory", None), "costs", None)
        seconds = self.drafter.base_weights_seconds
        if costs is None or not seconds or costs.cost(1) is None:
            return False
        one = min(seconds.get("as_loaded", float("inf")), seconds.get("int8", float("inf")))
        if not costs.measured(2) or not costs.measured(1 + self.base_drafts):
            return False  # the curve read between measured sizes, not past them
        best = max((1 + k) / (costs.cost(1 + k) + k * one) for k in range(1, self.base_drafts + 1))
        return best < (1 + CLEARLY) / costs.cost(1)

    def _base_block(self, input_ids: torch.LongTensor) -> None:
        """This block is a base-LM chain: a batch's shared adapter pass goes unused by this row, and the catch-up
        judged (`CATCH_UP`) is what the base LM's cache lacks of the committed tokens."""
        self.ready = None
        cached = self.base_chain.cache.get_seq_length()
        self.caught_up, self.read_prompt = input_ids.shape[1] - cached, cached == 0

    def _ar_count(self) -> int | str:
        """m for this block ("base": a base-LM chain): the setting, or (adaptive budget) the choice's, after it
        learns what the last block did, when that block's step was this row's last (a plain step in between leaves
        it unjudged, and so do a block the budget cut to a size it measures, `DraftTree.measuring`, and one whose
        first pass caught up on more than `CATCH_UP` committed tokens: the prompt, or a long run of plain steps)."""
        if self.ar_choice is None:
            return "base" if self.base_drafts else self.ar_drafts
        context = "copying" if self.by_copying and self.copying else ""
        return self._judged_choice(choice_of(self.drafter, self.ar_drafts, self.base_drafts > 0, context))

    def _judged_choice(self, choice: ArChoice) -> int | str:
        """`choice`'s pick for this block, after the memory the last block was chosen from learns what that block
        did (see `_ar_count` for which blocks are judged)."""
        now, last = time.perf_counter(), self.ar_step
        # a probe's judged step (the one after its catch-up, `ArChoice.choose`) is judged whatever it read
        probe = last is not None and last[4].probing == last[0] and not self.read_prompt
        judged = last is not None and self.stats.row_steps == last[2] + 1 and (self.caught_up <= CATCH_UP or probe)
        if judged and not (last[3] and last[3].measuring):
            last[4].learn(last[0], self.stats.accepted[-1] + 1, now - last[1])
        elif last is not None and self.stats.row_steps == last[2] + 1:  # a probe that read the prompt: its cost
            last[4].probed(last[0], self.stats.accepted[-1] + 1, now - last[1])
        m = choice.choose()
        self.ar_step, self.caught_up, self.read_prompt = (m, now, self.stats.row_steps, None, choice), 0, False
        return m

    def _extend(self, token: torch.LongTensor, T: int, d: int, masks: int) -> torch.Tensor:
        """(1 + masks, H) outputs of one drafter pass over sampled draft d (1, 1), after T committed tokens and
        drafts 1..d-1, and `masks` mask slots after it; the draft stays in the cache (`sampled_tree` crops it),
        the masks do not. With feature injection every fed slot gets the features mask slots get."""
        device, position = self.drafter.device, T + d - 1
        feed = torch.cat([self.known(token.to(device)), self.mask_ids[:, :masks]], dim=-1)  # (1, 1 + masks)
        positions = torch.arange(position, position + 1 + masks, device=device)[None]  # (1, 1 + masks)
        features = self._aligned(T - 1, T)  # (1, K, L*H): the anchor's and the masks' (all equal), or None
        if features is not None:
            features = features[:, : 1 + masks]
        out = self.drafter(feed, position_ids=positions, past_key_values=self.cache, features=features, use_cache=True)
        if masks:
            self.cache.crop(-masks)
        return out.last_hidden_state[0]

    def _take_ready(self, input_ids: torch.LongTensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The outputs `draft_rows` left for these committed tokens, once; None when there are none."""
        ready, self.ready = self.ready, None
        if ready is None or ready[0] != input_ids.shape[1]:
            return None
        return ready[1], ready[2]

    @classmethod
    @torch.no_grad()
    def draft_rows(cls, generators: list[PardCandidateGenerator], input_ids: list[torch.LongTensor]) -> None:
        """Step 1 of `draft_hidden` for several rows in one drafter pass (see the module docstring): afterwards each
        generator's cache holds its committed tokens and its next `draft_scores` / `draft_hidden` for the same
        tokens returns this pass's outputs. `input_ids[b]`: (1, T_b) row b's committed tokens. Rows whose fed
        lengths differ much (a row catching up on its prompt beside rows a block behind) go in separate passes
        (`length_groups`), so no row pays another's padding."""
        fed = [ids.shape[1] - g.cache.get_seq_length() for g, ids in zip(generators, input_ids, strict=True)]
        for group in length_groups(fed):
            cls._draft_group([generators[b] for b in group], [input_ids[b] for b in group])

    @classmethod
    def _draft_group(cls, generators: list[PardCandidateGenerator], input_ids: list[torch.LongTensor]) -> None:
        """`draft_rows` for rows that share one padded pass."""
        first = generators[0]
        drafter, K = first.drafter, first.block_size
        device, mask_id = drafter.device, int(first.mask_ids[0, 0])
        cached = [g.cache.get_seq_length() for g in generators]
        lengths = [ids.shape[1] for ids in input_ids]
        fed = [T - c + K - 1 for T, c in zip(lengths, cached, strict=True)]  # new tokens + masks per row
        B, C, W = len(generators), max(cached), max(fed)
        feed = torch.full((B, W), mask_id, dtype=torch.long, device=device)  # (B, W) left-padded
        positions = torch.zeros(B, W, dtype=torch.long, device=device)  # (B, W)
        seen = torch.zeros(B, C + W, dtype=torch.bool)  # (B, C + W) slots a row may attend to, built on the host
        for b, (ids, c, T, f) in enumerate(zip(input_ids, cached, lengths, fed, strict=True)):
            feed[b, W - f : W - K + 1] = first.known(ids[0, c:].to(device))
            positions[b, W - f :] = torch.arange(c, T + K - 1, device=device)
            seen[b, C - c : C] = True
            seen[b, C + W - f :] = True
        allowed = torch.ones(W, C + W, dtype=torch.bool).tril(C)[None] & seen[:, None]  # (B, W, C + W) causal
        allowed[:, torch.arange(W), C + torch.arange(W)] = True  # a padding slot sees itself (no empty softmax row)
        mask = mask_for_attention(allowed.to(device), drafter.config._attn_implementation, drafter.dtype)
        out = drafter(
            feed,
            position_ids=positions,
            attention_mask=mask,
            past_key_values=_stacked_cache([g.cache for g in generators], C),
            features=_stacked_features(generators, cached, lengths, W),
            use_cache=True,
        )
        hidden = out.last_hidden_state[:, W - K :]  # (B, K, H): anchor and masks, right-aligned in every row
        flat = hidden[:, : K - 1].reshape(B * (K - 1), -1)  # (B*(K-1), H): a 2-D input, the fast CPU path
        scores = F.linear(flat, first.head_weight, first.head_bias).view(B, K - 1, -1)  # (B, K-1, Vd)
        for b, (g, c, T, f) in enumerate(zip(generators, cached, lengths, fed, strict=True)):
            keep = torch.cat([torch.arange(C - c, C), torch.arange(C + W - f, C + W - f + T - c)]).to(device)
            g.cache = DynamicCache()
            for i, layer in enumerate(out.past_key_values.layers):
                g.cache.update(
                    layer.keys[b : b + 1].index_select(2, keep), layer.values[b : b + 1].index_select(2, keep), i
                )
            g.ready = (T, hidden[b], scores[b])


def _stacked_cache(caches: list[DynamicCache], width: int) -> DynamicCache:
    """One (B, heads, width, d) cache per layer from per-row caches, each left-padded with zeros to `width`."""
    stacked = DynamicCache()
    filled = next((c for c in caches if c.get_seq_length()), None)
    if filled is None:
        return stacked
    for i, layer in enumerate(filled.layers):
        empty = layer.keys[:, :, :0]  # (1, heads, 0, d): a row whose cache is still empty
        pairs = [(c.layers[i].keys, c.layers[i].values) if c.get_seq_length() else (empty, empty) for c in caches]
        keys = torch.cat([left_pad(k, width) for k, _ in pairs])  # (B, heads, width, d)
        values = torch.cat([left_pad(v, width) for _, v in pairs])
        stacked.update(keys, values, i)
    return stacked


def _stacked_features(generators, cached: list[int], lengths: list[int], width: int) -> torch.Tensor | None:
    """(B, width, L*H) each row's injected features, left-padded with zeros; None without feature injection."""
    rows = [g._aligned(c, T) for g, c, T in zip(generators, cached, lengths, strict=True)]
    known = next((r for r in rows if r is not None), None)
    if known is None:
        return None
    stacked = known.new_zeros(len(rows), width, known.shape[-1])
    for b, r in enumerate(rows):
        if r is not None:
            stacked[b, width - r.shape[1] :] = r[0]
    return stacked


__all__ = ["PardCandidateGenerator"]

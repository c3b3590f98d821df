"""The speculative step, written once: single sequences (a batch of one), batches and the server all run it.

One step over the rows of a `SpeculativeBatch` (B rows, N_b draft nodes in row b, n = 1 + max N_b fed slots per
row, S cached slots; a row's last committed token, its anchor, is not in the target's cache yet):

1) draft: every unfinished row's candidate generator (its drafter kind's) drafts a tree under the anchor: an argmax
   chain, a best-first tree, or exact-q draws; plus a prompt-lookup branch (docs/verification.md section 1); a kind
   that declares `draft_rows` (PARD) runs its drafter once for all drafting rows first; the budget plans the step
   (`Budget.plan`, docs/budget.md): the adaptive one may skip the drafter (a plain step) or cut each tree to the
   nodes that pay for their verification on this machine;
2) feed: `[anchor, nodes]` per row, padded to n; positions = anchor position + depth; a (B, n, S + n) mask in which
   a node sees its row's valid cache slots, its ancestors and itself (none for one unpadded row's chain);
3) verify: ONE target forward over (B, n), the drafter's tapped hidden states returned with the logits;
4) accept: per row, the target's rows processed as plain `generate` processes them (p), then greedy acceptance
   or multi-draft speculative sampling with the exact q every node was drawn from (docs/verification.md
   sections 4-6);
5) commit: accepted drafts + one target token, cut where plain `generate` stops (max_length, EOS, criteria);
6) keep: each row's drafter gets the tapped features of its committed rows; the target's cache keeps the prefix
   and the committed rows only (a crop when one row keeps a prefix of its fed slots, else a gather that
   re-aligns the rows); the budget learns what the step did and cost (`Budget.learn`).

Host syncs per step and row: the tree's token ids (drafter top-k or draws) and the acceptance decisions (greedy:
the target's argmax rows, once; sampling: one per child tried). No loop touches the vocabulary dimension.
"""

from __future__ import annotations

import functools
import time

import torch

from ..models.target_features import tapped_features
from ..verification.acceptance import greedy_acceptance, speculative_sampling
from ..verification.processed import probabilities, process_rows
from ..verification.prompt_lookup import prompt_lookup_candidates
from ..verification.tree import DraftTree, mask_for_attention, visibility_rows
from .batch import Row, SpeculativeBatch
from .budget import StepRecord


@torch.no_grad()
def speculative_step(batch: SpeculativeBatch) -> None:
    """One drafted target forward for every unfinished row of `batch` (finished rows ride along with no drafts)."""
    rows, budget = batch.rows, batch.budget  # FixedBudget: the settings' fixed sizes
    if not rows:
        return
    # 1) draft (the adaptive budget may skip the drafter, or keep only the nodes worth verifying)
    started = time.perf_counter()
    plan = budget.plan(len(rows), functools.partial(draft_trees, batch))
    trees = plan.trees
    draft_seconds = time.perf_counter() - started
    verify_started = time.perf_counter()
    # 2) feed
    feed, positions, mask = verification_inputs(batch, trees)  # (B, n), (B, n), mask or None
    # 3) verify
    out = batch.target(
        feed,
        attention_mask=mask,
        position_ids=positions,
        **{batch.cache_arg: batch.cache},
        use_cache=True,
        output_hidden_states=batch.taps,
    )
    raw = out.logits.float()  # (B, n, V)
    features = tapped_features(out.hidden_states, batch.layer_ids, feed.shape[1])  # (B, n, L*H) or None
    kept: list[list[int]] = []
    paths: list[list[int] | None] = []  # what the budget learns: each row's accepted path (None: a finished row)
    total_committed = 0
    for b, (row, tree) in enumerate(zip(rows, trees, strict=True)):
        if row.done:
            kept.append([])
            paths.append(None)
            continue
        # 4) accept
        processed = process_rows(row.processors, raw[b, : len(tree) + 1], functools.partial(path_context, row, tree))
        if batch.do_sample:
            path, bonus = speculative_sampling(tree, probabilities(processed))
        else:
            path, bonus = greedy_acceptance(tree, processed.argmax(dim=-1).tolist())
        row.generator.stats.record(len(tree), len(path))
        row.copying = any(tree.from_lookup(c) for c in path)
        paths.append(path)
        # 5) commit
        fed = [0] + [c + 1 for c in path]  # fed slots of the anchor and the accepted path
        new = torch.tensor([[tree.tokens[c] for c in path] + [bonus]], device=row.ids.device)
        committed = batch.commit(row, new)
        total_committed += committed
        if row.scores is not None:  # return_dict_in_generate with output_scores / output_logits
            row.scores.extend(processed[r : r + 1] for r in fed[:committed])
        if row.logits is not None:
            row.logits.extend(raw[b, r : r + 1] for r in fed[:committed])
        # 6) keep (drafter side; the cache below, for every row at once)
        if features is not None:
            row.generator.queue_features(features[b : b + 1, fed[:committed]])
        kept.append(fed[:committed])
    batch.keep_fed(kept, feed.shape[1])
    verify_seconds = time.perf_counter() - verify_started  # what this step cost (the acceptance synced the device)
    caught_up = plan.drafted and any(row.drafter_behind for row in rows)  # a join's prompt, plain steps' tokens
    for row in rows:
        row.drafter_behind = not plan.drafted
    budget.learn(StepRecord(plan, paths, feed.shape[1], verify_seconds, draft_seconds, total_committed, caught_up))


def draft_trees(batch: SpeculativeBatch) -> list[DraftTree]:
    """Step 1 for every row; a base that drafts rows together (its capability `draft_rows`) first runs its drafter
    once over every row that drafts, and each row's tree is then built from that pass's outputs."""
    drafting = [row for row in batch.rows if not row.done and block_room(row, batch.exact_q) > 0]
    if batch.draft_rows and len(drafting) > 1:
        batch.generator_class.draft_rows([row.generator for row in drafting], [row.ids for row in drafting])
    return [draft_tree(batch, row) for row in batch.rows]


def block_room(row: Row, sampled: bool) -> int:
    """Drafts the drafter may propose for `row` this step in depth: its block (a dependent sampled chain may run
    past it), capped by what can still be committed."""
    room = row.max_length - row.ids.shape[1] - 1  # drafts that can still be committed before the bonus token
    return min(row.generator.most_drafts(sampled), room)


def draft_tree(batch: SpeculativeBatch, row: Row) -> DraftTree:
    """Step 1 for one row: its drafter kind's tree under the anchor, plus a prompt-lookup branch."""
    settings = batch.settings
    room = row.max_length - row.ids.shape[1] - 1  # drafts that can still be committed before the bonus token
    k = block_room(row, batch.exact_q)
    if row.done or k <= 0:
        tree = DraftTree()
    elif batch.exact_q:
        row.generator.copying = row.copying  # a finished step's outcome: the choice of block may read it
        tree = row.generator.sampled_tree(row.ids, k, settings.sample_branches, row.processors)
    else:
        tree = row.generator.greedy_tree(row.ids, k, settings.tree_budget, settings.tree_topk)
    if settings.prompt_lookup_tokens and room > 0 and not row.done:
        width = min(settings.prompt_lookup_tokens, room)
        tree.add_chain(prompt_lookup_candidates(row.ids, settings.prompt_lookup_ngram, width), merge=not batch.exact_q)
    tree.copying = row.copying
    return tree


def verification_inputs(batch: SpeculativeBatch, trees: list[DraftTree]):
    """Step 2: (B, n) fed ids, (B, n) positions and the attention mask (None for one unpadded row's chain).

    Built as host lists and sent as three tensors (ids, positions, tree block), whatever the tree sizes: per-row and
    per-node tensor writes would each be one small op (and, on a GPU, one launch)."""
    dev = batch.target.device
    B, S = batch.valid.shape
    n = max(len(t) for t in trees) + 1
    ids, pos = [], []
    for row, tree in zip(batch.rows, trees, strict=True):
        T, pad = row.ids.shape[1], n - 1 - len(tree)
        anchor = row.new_tokens[-1] if row.new_tokens else int(row.ids[0, -1])  # the same token, kept on the host
        ids.append([anchor, *tree.tokens] + [batch.pad_token_id] * pad)
        last = T - 1 + row.position_shift  # the anchor's position, as plain generate numbers it
        pos.append([last] + [last + d for d in tree.depths()] + [0] * pad)
    feed = torch.tensor(ids, dtype=torch.long, device=dev)  # (B, n)
    positions = torch.tensor(pos, dtype=torch.long, device=dev)  # (B, n)
    if B == 1 and trees[0].is_chain():  # one row is never padded: causal attention, no mask
        return feed, positions, None
    block = torch.tensor([visibility_rows(t, n) for t in trees], dtype=torch.bool, device=dev)  # (B, n, n)
    allowed = torch.cat([batch.valid[:, None, :].expand(B, n, S), block], dim=-1)  # (B, n, S + n) True = attend
    return feed, positions, mask_for_attention(allowed, batch.target.config._attn_implementation, batch.target.dtype)


def path_context(row: Row, tree: DraftTree, fed: int) -> torch.LongTensor:
    """(1, P + T + depth) what logits processors see before fed slot `fed`: the row's left padding (as plain batched
    generate shows it), its committed tokens and the tree path to the slot."""
    seen = row.ids if row.padding is None else torch.cat([row.padding, row.ids], dim=-1)
    if fed == 0:
        return seen
    path = torch.tensor([tree.tokens[i] for i in tree.path_to(fed - 1)], device=seen.device)
    return torch.cat([seen, path[None]], dim=-1)


__all__ = ["block_room", "draft_tree", "draft_trees", "path_context", "speculative_step", "verification_inputs"]

"""DCOCO's prefix-first walk over candidate transition scores (pure functions of tensors), for decoding and training
alike.

Scores come from the corrector for n blocks of k drafted slots with K candidates each:
    first: (n, K)          score of each slot-1 candidate after the anchor
    nxt:   (n, k - 1, K, K) nxt[:, s, i, j] = score of candidate j at slot s + 2 after candidate i at slot s + 1
(each = the drafter's unary log-probability of the candidate + the learned transition score).

Greedy: every slot takes the best continuation of the chosen predecessor. Sampling: every slot is drawn from
q = softmax(scores / temperature) over its K candidates given the chosen predecessor; `walk_q` gives those exact
conditionals along any walk (zero outside the candidates), the q speculative sampling and on-policy training use.
"""

from __future__ import annotations

import torch


def prefix_first_walk(first: torch.Tensor, nxt: torch.Tensor) -> torch.LongTensor:
    """(n, k) chosen candidate index per slot (no host sync: indices stay on the device)."""
    choice = first.argmax(dim=-1)  # (n,)
    rows = torch.arange(first.shape[0], device=first.device)
    picks = [choice]
    for s in range(nxt.shape[1]):
        choice = nxt[rows, s, choice].argmax(dim=-1)
        picks.append(choice)
    return torch.stack(picks, dim=1)


def walk_logits(first: torch.Tensor, nxt: torch.Tensor, picks: torch.LongTensor) -> torch.Tensor:
    """(n, M, k, K) the scores each slot of M walks per block is drawn from, given the walk's own predecessors
    `picks` (n, M, k)."""
    n, M, k = picks.shape
    rows = [first[:, None].expand(n, M, -1)]
    for s in range(k - 1):
        rows.append(nxt[:, s].gather(1, picks[:, :, s, None].expand(n, M, nxt.shape[-1])))  # (n, M, K)
    return torch.stack(rows, dim=2)


def walk_q(first: torch.Tensor, nxt: torch.Tensor, picks: torch.LongTensor, temperature: float) -> torch.Tensor:
    """(n, M, k, K) q of every slot of the walks `picks` (n, M, k): softmax(score(predecessor -> .) / T)."""
    return torch.softmax(walk_logits(first, nxt, picks).float() / temperature, dim=-1)


def sampled_walks(
    first: torch.Tensor, nxt: torch.Tensor, temperature: float, walks: int = 1, rng: torch.Generator | None = None
) -> tuple[torch.LongTensor, torch.Tensor]:
    """Draw `walks` independent walks per block: (n, walks, k) candidate indices and (n, walks, k, K) the q each
    slot was drawn from (`walk_q` of the drawn walks)."""
    n, K = first.shape
    q = torch.softmax(first.float() / temperature, dim=-1)  # (n, K)
    choice = torch.multinomial(q, walks, replacement=True, generator=rng)  # (n, walks)
    picks = [choice]
    for s in range(nxt.shape[1]):
        rows = nxt[:, s].gather(1, choice[:, :, None].expand(n, walks, K))  # (n, walks, K)
        q = torch.softmax(rows.float() / temperature, dim=-1).reshape(n * walks, K)
        choice = torch.multinomial(q, 1, generator=rng).view(n, walks)
        picks.append(choice)
    picks = torch.stack(picks, dim=2)  # (n, walks, k)
    return picks, walk_q(first, nxt, picks, temperature)


def conditional_log_probs(first: torch.Tensor, nxt: torch.Tensor) -> list[torch.Tensor]:
    """For one block ((K,) first, (k - 1, K, K) nxt), per depth (parents, K) log-softmax of the scores given the
    parent's candidate (1 parent at depth 1): what a best-first tree over the walk reads."""
    return [first.float().log_softmax(-1)[None]] + [nxt[s].float().log_softmax(-1) for s in range(nxt.shape[0])]


__all__ = ["conditional_log_probs", "prefix_first_walk", "sampled_walks", "walk_logits", "walk_q"]

"""DCOCO's prefix-first walk over candidate transition scores (pure functions of tensors).

Scores come from the corrector for a block of k drafted slots with K candidates each:
    first: (K,)          score of each slot-1 candidate after the anchor
    nxt:   (k - 1, K, K) nxt[s, i, j] = score of candidate j at slot s + 2 after candidate i at slot s + 1
(each = the drafter's unary log-probability of the candidate + the learned transition score).

Greedy: every slot takes the best continuation of the chosen predecessor. Sampling: every slot is drawn from
softmax(scores / temperature) over its K candidates given the chosen predecessor; those exact conditionals are
returned as q for speculative sampling (zero outside the candidates).
"""

from __future__ import annotations

import torch


def prefix_first_walk(first: torch.Tensor, nxt: torch.Tensor) -> torch.LongTensor:
    """(k,) chosen candidate index per slot (no host sync: indices stay on the device)."""
    choice = first.argmax()
    picks = [choice]
    for s in range(nxt.shape[0]):
        choice = nxt[s, choice].argmax()
        picks.append(choice)
    return torch.stack(picks)


def sampled_walk(
    first: torch.Tensor, nxt: torch.Tensor, temperature: float, branches: int = 1
) -> tuple[torch.LongTensor, torch.Tensor]:
    """Draw the walk: (k, branches) candidate indices and (k, K) the q each slot's draws came from.

    Column 0 is the walk (it conditions the next slot); further columns are i.i.d. siblings from the same q.
    """
    q = torch.softmax(first.float() / temperature, dim=-1)  # (K,)
    draws = torch.multinomial(q, branches, replacement=True)  # (branches,)
    rows, picks = [q], [draws]
    for s in range(nxt.shape[0]):
        q = torch.softmax(nxt[s, draws[0]].float() / temperature, dim=-1)
        draws = torch.multinomial(q, branches, replacement=True)
        rows.append(q)
        picks.append(draws)
    return torch.stack(picks), torch.stack(rows)


def conditional_log_probs(first: torch.Tensor, nxt: torch.Tensor) -> list[torch.Tensor]:
    """Per depth, (parents, K) log-softmax of the scores given the parent's candidate (1 parent at depth 1)."""
    return [first.float().log_softmax(-1)[None]] + [nxt[s].float().log_softmax(-1) for s in range(nxt.shape[0])]


__all__ = ["conditional_log_probs", "prefix_first_walk", "sampled_walk"]

"""A latent mixture of product distributions over a block (DBLAST), and its exact conditionals.

    q(x_1..x_k) = sum_z pi_z prod_s q_s(x_s | z)

Sampling draws z ~ pi, then every position in parallel from q_s(. | z). Speculative sampling needs the
conditional of each drafted token given the ones before it, which is the posterior-weighted mixture
    q(x_s | x_<s) = sum_z w_s(z) q_s(x_s | z),   w_1 = pi,   w_{s+1}(z) proportional to w_s(z) q_s(x_s | z)
(docs/dblast.md section 3). Verifying with these exact conditionals is lossless; so would be q_s(. | z) of the
sampled z, but the marginal accepts more (Jensen on the concave min(p, .)).

Shapes: k positions, R components, V vocabulary (the drafter's, possibly reduced).
"""

from __future__ import annotations

import torch


def mixture_conditionals(log_pi: torch.Tensor, logq: torch.Tensor, tokens: torch.LongTensor) -> torch.Tensor:
    """(k, V) q(. | x_<s) for every position s, given (R,) log pi, (k, R, V) log q_s(.|z) and (k,) drafted tokens."""
    picked = logq.gather(2, tokens[:, None, None].expand(-1, logq.shape[1], 1))[..., 0]  # (k, R) log q_s(x_s|z)
    before = torch.cumsum(picked, dim=0) - picked  # (k, R) sum over earlier positions
    log_w = torch.log_softmax(log_pi[None] + before, dim=-1)  # (k, R) posterior weights w_s
    return torch.logsumexp(log_w[:, :, None] + logq, dim=1).exp()  # (k, V)


def sample_block(log_pi: torch.Tensor, logq: torch.Tensor, branches: int = 1) -> tuple[torch.LongTensor, torch.Tensor]:
    """Draw a block: z ~ pi, all positions from q_s(.|z) in parallel; (k, branches) tokens and (k, V) conditionals.

    Column 0 is the block. Further columns are i.i.d. draws from each position's exact conditional given the
    block's earlier tokens (siblings for multi-draft verification).
    """
    z = torch.multinomial(log_pi.exp(), 1)[0]
    block = torch.multinomial(logq[:, z].exp(), 1)[:, 0]  # (k,)
    conditionals = mixture_conditionals(log_pi, logq, block)  # (k, V)
    if branches == 1:
        return block[:, None], conditionals
    siblings = torch.multinomial(conditionals, branches - 1, replacement=True)  # (k, branches - 1)
    return torch.cat([block[:, None], siblings], dim=1), conditionals


def greedy_component(log_pi: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """argmax_z [log pi_z + sum_s max_v log q_s(v|z)]: the component whose own argmax block is most likely."""
    return (log_pi + logq.amax(dim=-1).sum(dim=0)).argmax()


__all__ = ["greedy_component", "mixture_conditionals", "sample_block"]

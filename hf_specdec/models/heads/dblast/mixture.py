"""A latent mixture of product distributions over a block (DBLAST), and its exact conditionals: pure functions of
tensors, batched over n blocks, used by decoding and training alike.

    q(x_1..x_k) = sum_z pi_z prod_s q_s(x_s | z)

Sampling draws z ~ pi, then every position in parallel from q_s(. | z). Speculative sampling needs the
conditional of each drafted token given the ones before it, which is the posterior-weighted mixture
    q(x_s | x_<s) = sum_z w_s(z) q_s(x_s | z),   w_1 = pi,   w_{s+1}(z) proportional to w_s(z) q_s(x_s | z)
(docs/dblast.md section 3). Verifying with these exact conditionals is lossless; so would be q_s(. | z) of the
sampled z, but the marginal accepts more (Jensen on the concave min(p, .)).

Shapes: n blocks, M blocks drawn per block's mixture, k positions, R components, V vocabulary (the drafter's,
possibly reduced).
"""

from __future__ import annotations

import torch

from ....verification.processed import sample


def component_log_q(unary: torch.Tensor, offsets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """(n, k, R, V) log q_s(. | z) = log_softmax((U_s + Delta[s, z]) / T) from (n, k, V) slot scores U and
    (n, k, R, V) component offsets."""
    return torch.log_softmax((unary.float()[:, :, None] + offsets.float()) / temperature, dim=-1)


def mixture_conditionals(log_pi: torch.Tensor, logq: torch.Tensor, tokens: torch.LongTensor) -> torch.Tensor:
    """(n, M, k, V) q(. | x_<s) at every position s of M blocks per mixture, given (n, R) log pi, (n, k, R, V)
    log q_s(.|z) and (n, M, k) the blocks' tokens."""
    n, M, k = tokens.shape
    R = logq.shape[2]
    index = tokens[:, :, :, None, None].expand(n, M, k, R, 1)
    picked = logq[:, None].expand(n, M, k, R, -1).gather(4, index)[..., 0]  # (n, M, k, R) log q_s(x_s | z)
    before = torch.cumsum(picked, dim=2) - picked  # (n, M, k, R) sum over earlier positions
    weights = torch.softmax(log_pi[:, None, None].float() + before.float(), dim=-1)  # (n, M, k, R) posterior w_s(z)
    with torch.autocast(logq.device.type, enabled=False):  # float32 under a training autocast too, as q is exact
        return torch.einsum("nmkr,nkrv->nmkv", weights, logq.float().exp())  # (n, M, k, V)


def greedy_component(log_pi: torch.Tensor, logq: torch.Tensor) -> torch.LongTensor:
    """(n,) argmax_z [log pi_z + sum_s max_v log q_s(v|z)]: the component whose own argmax block is most likely."""
    return (log_pi + logq.amax(dim=-1).sum(dim=1)).argmax(dim=-1)


def greedy_block(log_pi: torch.Tensor, logq: torch.Tensor) -> torch.LongTensor:
    """(n, k) the greedy component's argmax block."""
    z = greedy_component(log_pi, logq)  # (n,)
    return logq[torch.arange(logq.shape[0], device=logq.device), :, z].argmax(dim=-1)


def sample_blocks(
    log_pi: torch.Tensor, logq: torch.Tensor, draws: int = 1, rng: torch.Generator | None = None
) -> torch.LongTensor:
    """(n, draws, k) blocks: each z ~ pi, then all positions from q_s(. | z) in parallel."""
    n, k, R, V = logq.shape
    z = torch.multinomial(log_pi.exp(), draws, replacement=True, generator=rng)  # (n, draws)
    rows = logq.permute(0, 2, 1, 3)[torch.arange(n, device=logq.device)[:, None], z]  # (n, draws, k, V)
    return sample(rows.exp().reshape(-1, V), 1, rng).view(n, draws, k)


__all__ = ["component_log_q", "greedy_block", "greedy_component", "mixture_conditionals", "sample_blocks"]

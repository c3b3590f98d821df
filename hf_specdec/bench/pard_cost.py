"""What a PARD drafter costs and accepts on this machine, before and during training (issue: a drafter that accepts).

* cost: median milliseconds of the target's forward over 1 (plain decode) and K tokens (verify) on a cache of
  `context` tokens, and of one drafter pass (2 new committed tokens + K-1 masks, its own head on K rows) on the
  same cache, for each K; `draft_over_verify` = drafter / verify at that K;
* acceptance: greedy chains (fixed budget, block K) through `target.generate(assistant_model=drafter)` on prompts
  the benchmark does not use; acceptance at depth d = P(draft d accepted | drafts 1..d-1 accepted and d drafted),
  tau = committed tokens per verify forward.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch
from transformers import DynamicCache

from ..models.pard import PardDrafter
from ..models.settings import DecodingSettings
from .environment import environment


def _median_ms(fn, reps: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


@torch.no_grad()
def cost_table(target, drafter: PardDrafter, blocks=(4, 8, 12), context: int = 200, reps: int = 5) -> list[dict]:
    dev = target.device
    ids = torch.randint(100, 20000, (1, context), generator=torch.Generator().manual_seed(0)).to(dev)
    target_cache = DynamicCache()
    target(ids, past_key_values=target_cache, use_cache=True)
    draft_cache = DynamicCache()
    drafter(ids.to(drafter.device), past_key_values=draft_cache, use_cache=True)
    rows = []

    def target_forward(n):
        target(
            ids[:, :n],
            past_key_values=target_cache,
            use_cache=True,
            position_ids=torch.arange(context, context + n, device=dev)[None],
        )
        target_cache.crop(-n)

    plain = _median_ms(lambda: target_forward(1), reps)
    for K in blocks:
        feed = torch.cat([ids[:, :2], torch.full((1, K - 1), drafter.config.mask_token_id, device=dev)], dim=-1)
        head = drafter.head_weight()  # (Vd, H): the draft vocabulary's rows, if it has one

        def draft_pass(feed=feed, K=K, head=head):
            out = drafter(
                feed.to(drafter.device),
                past_key_values=draft_cache,
                use_cache=True,
                position_ids=torch.arange(context, context + K + 1, device=drafter.device)[None],
            )
            torch.nn.functional.linear(out.last_hidden_state[0, -K:], head).argmax(-1)
            draft_cache.crop(-(K + 1))

        verify = _median_ms(lambda K=K: target_forward(K), reps)
        draft = _median_ms(draft_pass, reps)
        rows.append(
            {
                "block_size": K,
                "plain_decode_ms": plain,
                "verify_ms": verify,
                "drafter_ms": draft,
                "verify_over_plain": verify / plain,
                "draft_over_verify": draft / verify,
            }
        )
    return rows


def depth_acceptance(accepted: list[int], drafted: list[int], depth: int) -> list[float | None]:
    """P(draft d accepted | drafts before d accepted and d drafted), d = 1..depth."""
    out = []
    for d in range(1, depth + 1):
        reached = [a for a, n in zip(accepted, drafted, strict=True) if n >= d and a >= d - 1]
        out.append(None if not reached else sum(a >= d for a in reached) / len(reached))
    return out


@torch.no_grad()
def acceptance(target, drafter: PardDrafter, prompts: list[torch.LongTensor], block_size: int, new_tokens: int) -> dict:
    drafter.config.block_size = block_size
    drafter.decoding = DecodingSettings(budget="fixed")
    accepted, drafted = [], []
    for ids in prompts:
        target.generate(ids.to(target.device), max_new_tokens=new_tokens, do_sample=False, assistant_model=drafter)
        stats = drafter.last_acceptance_stats
        accepted += stats.accepted
        drafted += stats.drafted
    committed = sum(accepted) + len(accepted)
    return {
        "block_size": block_size,
        "tau": committed / max(1, len(accepted)),
        "steps": len(accepted),
        "per_depth": depth_acceptance(accepted, drafted, block_size - 1),
    }


def run_pard_cost(
    target,
    drafter: PardDrafter,
    prompts,
    out_dir: Path,
    new_tokens: int = 64,
    blocks=(4, 8, 12),
    label: str = "zero-shot",
) -> dict:
    report = {
        "label": label,
        "machine": environment(),
        "dtype": str(target.dtype),
        "cost": cost_table(target, drafter, blocks),
        "acceptance": [acceptance(target, drafter, prompts, K, new_tokens) for K in blocks],
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"pard_{label}.json").write_text(json.dumps(report, indent=1))
    return report


__all__ = ["acceptance", "cost_table", "depth_acceptance", "run_pard_cost"]

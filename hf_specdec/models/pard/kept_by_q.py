"""How often the target kept a base-LM chain's draft, by the q it was drawn with: what ends a chain with
`DecodingSettings.sampled_base_stop_on="kept"`.

The "path" rule reads the product of a chain's q as the chance the target keeps every draft. Near T=1 that reads
low: a draft is kept with chance min(1, p/q), which exceeds q wherever the two models spread their mass alike. On
the 1.5B's own samples at T=1 (HumanEval and MT-Bench, 6 prompts each), drafts the 0.5B drew with q below 0.05 were
kept 41-52% of the time, with q 0.4-0.5 62-63%, with q 0.95 or more 99%; the path rule ended a chain at the first
draft below its stop. Here each draft's chance is what drafts of its q realized on this drafter's verified chains:

1) q is read in one of `len(EDGES) + 1` buckets; each starts at its own middle q, worth `PRIOR` drafts (so a new
   drafter ends chains as the path rule does);
2) after each verified block of one chain without leaves (blocks of several chains, or with leaves beside the
   chain's drafts, `sample_branches` > 1, are not counted: their accepted count may end on a leaf), every draft
   up to the first one the target rejected is counted in its bucket, kept or not (drafts after a rejection were
   never judged; with a prompt-lookup branch beside the chain, the step's accepted count is read as the chain's); a
   bucket holds at most `MOST` drafts, older ones fading, so a change of text is followed;
3) a chain ends once the product of its drafts' chances falls below `sampled_base_stop`.

The estimate reads only verified chains before this one and the q of this chain's own draws, so each draft is still
drawn from the q its tree carries: the output distribution is the target's. The memories live on the drafter, one per
way of processing scores (temperature, top-p, ...: each spreads q and p differently), and carry from one `generate`
call to the next.
"""

from __future__ import annotations

from bisect import bisect_right

EDGES = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)  # bucket i holds q in [EDGES[i-1], EDGES[i])
PRIOR = 4.0  # drafts each bucket's starting chance (its middle q) is worth
MOST = 256.0  # drafts a bucket holds at most: past it, older ones fade by (MOST - 1) / MOST per new one


class KeptByQ:
    """Realized chance that the target keeps a draft, per bucket of the q it was drawn with (steps 1-2)."""

    def __init__(self) -> None:
        bounds = (0.0, *EDGES, 1.0)
        self.kept = [PRIOR * (lo + hi) / 2 for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]  # kept, prior in
        self.seen = [PRIOR] * len(self.kept)  # drafts judged (prior included)

    def chance(self, q: float) -> float:
        """Estimated chance that the target keeps a draft drawn with probability `q`, given the drafts before it."""
        i = bisect_right(EDGES, q)
        return self.kept[i] / self.seen[i]

    def learn(self, qs: list[float], accepted: int) -> None:
        """Step 2 for one verified chain: `qs` the q of its drafts in order, of which the target kept the first
        `accepted`."""
        if accepted < 0 or accepted > len(qs):
            raise ValueError(f"a chain of {len(qs)} drafts cannot have {accepted} kept")
        for d, q in enumerate(qs[: accepted + 1]):
            i = bisect_right(EDGES, q)
            if self.seen[i] >= MOST:
                fade = (MOST - 1) / MOST
                self.kept[i], self.seen[i] = self.kept[i] * fade, self.seen[i] * fade
            self.seen[i] += 1.0
            self.kept[i] += float(d < accepted)


def processing_key(logits_processor) -> tuple:
    """What sets how a call processes scores: each processor's class and its numeric settings, in order."""
    key = []
    for p in logits_processor or []:
        numbers = sorted((k, v) for k, v in vars(p).items() if isinstance(v, (int, float)) and not isinstance(v, bool))
        key.append((type(p).__name__, tuple(numbers)))
    return tuple(key)


def kept_of(drafter, logits_processor) -> KeptByQ:
    """The drafter's memory for this way of processing scores (step 3's estimate), new on first use."""
    memories = getattr(drafter, "_kept_by_q", None)
    if memories is None:
        memories = drafter._kept_by_q = {}  # on the drafter object, not in its config: never saved
    key = processing_key(logits_processor)
    if key not in memories:
        memories[key] = KeptByQ()
    return memories[key]


__all__ = ["EDGES", "MOST", "PRIOR", "KeptByQ", "kept_of", "processing_key"]

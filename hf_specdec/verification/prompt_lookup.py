"""Prompt-lookup candidates (Saxena 2023, "Prompt Lookup Decoding"): if the last n tokens occurred earlier in
the prompt or the output, the tokens that followed them there are a free draft. They join the drafter's tree
as an extra branch; verification keeps the output exact, so a wrong guess only costs tree width.
"""

from __future__ import annotations

import torch


def prompt_lookup_candidates(input_ids: torch.LongTensor, max_ngram: int, num_tokens: int) -> list[int]:
    """Tokens that followed the first occurrence of the longest matching suffix n-gram (as transformers' prompt
    lookup does: on code, the earliest match is usually the prompt's own text being restated).

    Args:
        input_ids: (1, T) committed tokens (prompt and output so far).
        max_ngram: longest suffix tried; shorter ones are tried down to 1.
        num_tokens: most candidate tokens returned.
    Returns up to `num_tokens` ids, or [] when no suffix of length 1..max_ngram occurred before.
    """
    ids = input_ids[0]
    T = ids.shape[0]
    for n in range(min(max_ngram, T - 1), 0, -1):
        windows = ids.unfold(0, n, 1)[: T - n]  # (T - n, n) every n-gram that has a token after it
        hits = (windows == ids[T - n :]).all(dim=1).nonzero().flatten()  # start positions
        if hits.numel():
            start = int(hits[0]) + n
            return ids[start : start + num_tokens].tolist()
    return []


__all__ = ["prompt_lookup_candidates"]

"""Logits -> the distributions generate() samples from, for many rows at once.

Plain sampling applies the call's logits processors (temperature, top-k, top-p, repetition penalty, ...) to
each next-token row given the tokens before it. Speculative decoding must use exactly the same processed p for
every verified row, and the same processing for the drafter's q, or it is not lossless. Warpers that ignore the
token history are applied to all rows in one call; any other processor gets each row with its own history.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from transformers import LogitsProcessorList
from transformers.generation.logits_process import (
    EpsilonLogitsWarper,
    EtaLogitsWarper,
    MinPLogitsWarper,
    PrefixConstrainedLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    TypicalLogitsWarper,
)

# warpers that only remove tokens by the scores' order or shape, never by id: they may run on a row's top K alone
_TRUNCATING = (
    TopKLogitsWarper,
    TopPLogitsWarper,
    MinPLogitsWarper,
    TypicalLogitsWarper,
    EpsilonLogitsWarper,
    EtaLogitsWarper,
)

_HISTORY_FREE = (TemperatureLogitsWarper, *_TRUNCATING)

# On a CPU a row's nucleus (top-p set) is looked for among its NUCLEUS_K highest scores: sorting the whole vocabulary,
# as transformers' warper does, costs about 18 ms a row on 2 cores for 152k ids, and a verify step processes one row
# per tree node. A row whose decision is not certain there (top K holding less than top_p, a tie or a cumulative
# probability within NUCLEUS_MARGIN of the cut) gets transformers' warper.
NUCLEUS_K = 1024
NUCLEUS_MARGIN = 1e-4


def history_free(logits_processor: LogitsProcessorList | None) -> bool:
    """True when no processor reads the token history (each row can be processed without its context)."""
    return all(isinstance(proc, _HISTORY_FREE) for proc in logits_processor or ())


def process_rows(
    logits_processor: LogitsProcessorList | None,
    logits: torch.Tensor,
    context_of: Callable[[int], torch.LongTensor],
) -> torch.Tensor:
    """(N, V) processed float32 scores; row r is processed given `context_of(r)` (1, T_r), the tokens before it."""
    logits = logits.float()
    if not logits_processor:
        return logits
    if logits.device.type == "cpu":
        logits_processor = sort_free(logits_processor)
    if history_free(logits_processor):
        return logits_processor(context_of(0), logits)
    return torch.cat([logits_processor(context_of(r), logits[r : r + 1]) for r in range(logits.shape[0])])


def nucleus(scores: torch.Tensor, warper: TopPLogitsWarper) -> torch.Tensor:
    """(N, V) scores after nucleus sampling's cut (Holtzman et al., 2020) as transformers' `TopPLogitsWarper` makes
    it, without sorting the vocabulary: a token is removed when its ascending cumulative probability is at most
    1 - top_p, i.e. when the tokens scored above it hold at least top_p; the `min_tokens_to_keep` highest stay.
    Decided among each row's `NUCLEUS_K` highest scores; a row where that is not certain (see `NUCLEUS_K`) is cut by
    `warper` itself. One host read (which rows), so for the CPU only, where the read costs nothing."""
    top_p, least = warper.top_p, warper.min_tokens_to_keep
    k = min(NUCLEUS_K, scores.shape[-1])
    if least >= k:
        return warper(None, scores)
    top, ids = scores.topk(k, dim=-1)  # (N, k) in descending order
    probs = torch.softmax(scores, dim=-1).gather(1, ids)  # (N, k)
    above = probs.cumsum(dim=-1) - probs  # (N, k) probability of the tokens ranked above each
    keep = above < top_p  # (N, k)
    keep[:, :least] = True
    kept = keep.sum(dim=-1, keepdim=True)  # (N, 1) a prefix of each row's top k: `least` .. k tokens
    out_rank = kept.clamp(max=k - 1)  # (N, 1) the highest token removed, where one of the k is
    certain = (kept < k) & (above.gather(1, out_rank) >= top_p + NUCLEUS_MARGIN)
    certain &= top.gather(1, kept - 1) > top.gather(1, out_rank)  # no tie across the cut
    certain &= (above.gather(1, kept - 1) < top_p - NUCLEUS_MARGIN) | (kept <= least)
    removed = torch.ones_like(scores, dtype=torch.bool).scatter_(1, ids, ~keep)  # (N, V)
    out = scores.masked_fill(removed, warper.filter_value)
    unsure = (~certain[:, 0]).nonzero()[:, 0].tolist()  # the host read
    if unsure:
        out[unsure] = warper(None, scores[unsure])
    return out


class SortFreeTopP(TopPLogitsWarper):
    """transformers' `TopPLogitsWarper` with the same settings, cutting through `nucleus`."""

    @classmethod
    def of(cls, warper: TopPLogitsWarper) -> SortFreeTopP:
        return cls(warper.top_p, warper.filter_value, warper.min_tokens_to_keep)

    def __call__(self, input_ids: torch.LongTensor | None, scores: torch.Tensor) -> torch.Tensor:
        return nucleus(scores, TopPLogitsWarper(self.top_p, self.filter_value, self.min_tokens_to_keep))


def sort_free(logits_processor: LogitsProcessorList) -> LogitsProcessorList:
    """The processors with each `TopPLogitsWarper` cutting through `nucleus` (the list itself if it has none)."""
    if not any(type(proc) is TopPLogitsWarper for proc in logits_processor):
        return logits_processor
    swap = lambda proc: SortFreeTopP.of(proc) if type(proc) is TopPLogitsWarper else proc  # noqa: E731
    return LogitsProcessorList(swap(proc) for proc in logits_processor)


def row_processors(logits_processor: LogitsProcessorList | None, row: int, batch_size: int) -> LogitsProcessorList:
    """The processors as plain batched generate applies them to row `row`, for calling on that row alone: per-row
    state is sliced (repetition penalty's per-row `prompt_ignore_length`, which skips the row's left padding).
    A processor that needs the row's index in the batch (`prefix_allowed_tokens_fn`) is refused for batches."""
    out = LogitsProcessorList()
    for proc in logits_processor or ():
        if isinstance(proc, RepetitionPenaltyLogitsProcessor) and isinstance(proc.prompt_ignore_length, torch.Tensor):
            proc = copy.copy(proc)
            proc.prompt_ignore_length = proc.prompt_ignore_length[row : row + 1]
        elif isinstance(proc, PrefixConstrainedLogitsProcessor) and batch_size > 1:
            raise ValueError(
                "prefix_allowed_tokens_fn receives the row's batch index, which batched drafting does not keep; "
                "call generate once per prompt with it."
            )
        out.append(proc)
    return out


def call_temperature(logits_processor: LogitsProcessorList | None) -> float:
    """The call's sampling temperature (1.0 when no temperature warper is set)."""
    for proc in logits_processor or ():
        if isinstance(proc, TemperatureLogitsWarper):
            return float(proc.temperature)
    return 1.0


def top_probabilities(
    logits_processor: LogitsProcessorList | None,
    logits: torch.Tensor,
    context_of: Callable[[int], torch.LongTensor],
    k: int,
) -> tuple[torch.LongTensor, torch.Tensor]:
    """A draft distribution over each row's `k` most likely tokens: (N, k) token ids and (N, k) probabilities (rows
    sum to 1). The processors before the trailing truncating warpers (repetition penalty, temperature, ...) run on
    the whole row; the truncating warpers (top-k, top-p, min-p, ...) on its top `k` scores, so no full-vocabulary
    sort is paid. A list whose truncating warpers do not all come last is applied whole first. A q for drafting:
    acceptance must read this q, not the processed row's."""
    procs = list(logits_processor or ())
    cut = len(procs)
    while cut and isinstance(procs[cut - 1], _TRUNCATING):
        cut -= 1
    if any(isinstance(proc, _TRUNCATING) for proc in procs[:cut]):
        cut = len(procs)
    scores = process_rows(LogitsProcessorList(procs[:cut]), logits, context_of)  # (N, V)
    top, ids = scores.topk(min(k, scores.shape[-1]), dim=-1)  # (N, k) in descending order
    if cut < len(procs):
        top = LogitsProcessorList(procs[cut:])(context_of(0), top)
    return ids, probabilities(top)


def sample(q: torch.Tensor, n: int = 1, generator: torch.Generator | None = None) -> torch.LongTensor:
    """(rows, n) i.i.d. draws, with replacement, from each row of (rows, V) probabilities ((n,) from a (V,) row).

    A single draw is the first of two: for one draw torch.multinomial races exponentials, one random number per
    entry of the row (about 5 ms for a 152k vocabulary on a 2-core CPU); for two or more with replacement it
    searches the cumulative sum (about 0.3 ms). The draws are i.i.d., so the first of two is a draw from the row."""
    return torch.multinomial(q, max(n, 2), replacement=True, generator=generator)[..., :n]


def probabilities(scores: torch.Tensor) -> torch.Tensor:
    """softmax in float32 (-inf scores, e.g. outside top-k, get probability 0)."""
    return torch.softmax(scores.float(), dim=-1)


__all__ = [
    "SortFreeTopP",
    "call_temperature",
    "history_free",
    "nucleus",
    "probabilities",
    "process_rows",
    "sample",
    "sort_free",
    "top_probabilities",
]

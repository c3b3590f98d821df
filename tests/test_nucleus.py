"""The sort-free top-p cut (`verification/processed.py: nucleus`) against transformers' `TopPLogitsWarper`."""

from __future__ import annotations

import pytest
import torch
from transformers import LogitsProcessorList
from transformers.generation.logits_process import (
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopPLogitsWarper,
)

from hf_specdec.verification.processed import NUCLEUS_K, SortFreeTopP, history_free, nucleus, process_rows, sort_free

V = 151936  # Qwen2.5's vocabulary: what a CPU step sorts without the cut


class Counting(TopPLogitsWarper):
    """transformers' warper, counting the rows handed to it (the rows `nucleus` left to it)."""

    rows = 0

    def __call__(self, input_ids, scores):
        self.rows += scores.shape[0]
        return super().__call__(input_ids, scores)


@pytest.mark.parametrize("top_p", [0.5, 0.9, 0.95])
@pytest.mark.parametrize("least", [1, 3])
def test_the_cut_is_transformers_cut_on_peaked_flat_and_bf16_rows(top_p, least):
    """Rows from peaked (most decided among the top `NUCLEUS_K`) to flat (top K short of top_p: the warper's own
    sort), in float and rounded through bf16 (ties common): the scores equal the warper's exactly."""
    gen = torch.Generator().manual_seed(0)
    for scale in (8.0, 4.0, 0.5):
        rows = torch.randn(8, V, generator=gen) * scale
        for scores in (rows, rows.bfloat16().float()):
            warper = Counting(top_p, min_tokens_to_keep=least)
            assert torch.equal(nucleus(scores, warper), TopPLogitsWarper(top_p, min_tokens_to_keep=least)(None, scores))
            if scale == 8.0 and scores is rows:
                assert warper.rows <= 1, warper.rows  # peaked rows without ties are decided without the sort
            if scale == 0.5:
                assert warper.rows == 8  # the top K hold far less than top_p: every row sorted whole


def test_ties_across_the_cut_and_near_cuts_are_left_to_the_warper():
    """A tie between the lowest kept and the highest removed score, and a cumulative probability a hair from the cut:
    the order transformers' sort gives ties, and its own float sums, decide those rows."""
    scores = torch.full((3, V), -30.0)
    scores[:, :4] = torch.tensor([3.0, 2.0, 2.0, 1.0]).log()  # probabilities about 3/8, 2/8, 2/8, 1/8
    scores[2, :4] = torch.tensor([0.5, 0.25, 0.25, 1e-30]).log()  # token 0 holds 0.5: at top_p = 0.5 a float question
    # top_p 0.5: rows 0 and 1 cut between their tied 2/8s, row 2 right at token 0's 0.5; top_p 0.75: rows 0 and 1 cut
    # clearly (after the 2/8s), row 2 at 0.75 between its tied 1/4s
    for top_p, unsure in ((0.5, 3), (0.75, 1)):
        warper = Counting(top_p)
        assert torch.equal(nucleus(scores, warper), TopPLogitsWarper(top_p)(None, scores))
        assert warper.rows == unsure


def test_process_rows_on_a_cpu_cuts_through_nucleus_with_the_other_processors_unchanged():
    procs = LogitsProcessorList([RepetitionPenaltyLogitsProcessor(1.3), TemperatureLogitsWarper(0.7)])
    assert sort_free(procs) is procs  # nothing to swap
    procs.append(TopPLogitsWarper(0.9))
    swapped = sort_free(procs)
    assert [type(p) for p in swapped] == [RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper, SortFreeTopP]
    assert history_free(LogitsProcessorList(swapped[1:]))  # still a truncating warper where that is asked
    scores = torch.randn(4, V, generator=torch.Generator().manual_seed(1)) * 6
    ids = torch.tensor([[5, 9, 5]])
    plain = torch.cat([procs(ids, scores[r : r + 1].clone()) for r in range(4)])  # as generate processes each row
    assert torch.equal(process_rows(procs, scores, lambda r: ids), plain)
    assert NUCLEUS_K < V

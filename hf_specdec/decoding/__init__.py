"""Decoding: the one speculative step (`step.py`) over a batch of rows (`batch.py`), run by `generate()` (`loop.py`,
behind the one private seam `transformers_seam.py`) and by the continuous-batching server (`server.py`);
`budget.py` chooses how much each step verifies, from the drafter's `BudgetMemory` (`budget_memory.py`: the counts
of `acceptance_model.py`, the curve of `step_cost.py`); `validation.py` refuses what a drafted call cannot honour."""

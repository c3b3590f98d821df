"""Decoding: the one speculative step (`step.py`) over a batch of rows (`batch.py`), run by `generate()` (`loop.py`,
behind the one private seam `transformers_seam.py`) and by the continuous-batching server (`server.py`);
`budget.py` (with `step_cost.py` and `acceptance_model.py`) chooses how much
each step verifies; `validation.py` refuses what a drafted call cannot honour."""

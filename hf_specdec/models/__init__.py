"""Drafter kinds, one folder each, and what every kind shares.

`registry.py` is the one table of kinds; importing this package registers the four built-in kinds
(`block_drafter`, `dcoco`, `dblast`, `pard`). Shared pieces: decode-time settings saved with a drafter
(`settings.py`), what a drafter reads from its target (`target_features.py`), where a drafter's base LM lives
(`base_models.py`), loading any drafter by its checkpoint (`loading.py`, LoRA adapter folders included), and the
LM-head stride fix (`lm_head_strides.py`).
"""

from . import block_drafter, dblast, dcoco, pard  # noqa: F401  (each registers its kind)

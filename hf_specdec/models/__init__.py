"""Drafter kinds, one folder each, and what every kind shares.

`registry.py` is the one table of kinds; importing this package registers the six built-in kinds
(`block_drafter`, `dcoco`, `dblast`, `pard`, and the PARD drafter with either head: `pard_dcoco`, `pard_dblast`).
Shared pieces: decode-time settings saved with a drafter
(`settings.py`), what a drafter reads from its target (`target_features.py`), where a drafter's base LM lives
(`base_models.py`), loading any drafter by its checkpoint (`loading.py`, LoRA adapter folders included), and the
LM-head stride fix (`lm_head_strides.py`).
"""

from . import block_drafter, dblast, dcoco, pard, pard_dblast, pard_dcoco  # noqa: F401  (each registers its kind)

"""peft's one deprecated probe, silenced where hf_specdec wraps a drafter in peft.

peft (0.21 at least) builds every `PeftModel` with `getattr(model, "is_gradient_checkpointing", True)`. In
transformers 5.x that property is a deprecated alias of `is_activation_checkpointing` and warns on each access
("`is_gradient_checkpointing` is deprecated ... Use `is_activation_checkpointing`", a FutureWarning), so loading
a LoRA adapter folder (a shipped PARD drafter) printed it on every run, from a line of peft's, not ours. Nothing a
caller can change stops it, so `quiet_peft_probe()` filters exactly that message, only around hf_specdec's own
peft calls (loading an adapter, adding or continuing LoRA for training); every other warning still shows.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

PROBE_WARNING = r"`is_gradient_checkpointing` is deprecated"


@contextmanager
def quiet_peft_probe() -> Iterator[None]:
    """Run a peft call without transformers' deprecation warning for peft's `is_gradient_checkpointing` probe."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=PROBE_WARNING, category=FutureWarning)
        yield


__all__ = ["quiet_peft_probe"]

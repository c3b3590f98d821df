"""SpecOPD for a PARD drafter: on-policy distillation of a drafter adapted from a causal LM (docs/specopd.md
section 4, docs/pard.md section 5).

A PARD pass drafts every slot of a block at once, each slot seeing the committed tokens and the masks before it,
never the tokens drafted at earlier slots: its q is prefix-independent, exactly the block drafter's policy
(`BlockPolicy`, registered with the kind). SpecOPD's step is unchanged (`SpecOPDTrainer.sequence_loss`); what is
PARD's is the drafter around it:
- its states at the trunk's anchors come from one packed pass over the real tokens and each anchor's masks
  (`PardDrafter.anchor_states`, with gradients), the states decoding reads;
- it scores with its own LM head (`PardDrafter.head_weight`), the live one when full fine-tuning trains it
  (`DrafterTrainer.slot_logits`, for any base with its own embeddings);
- it is loaded, continued and saved as `PardTrainer` does it: a PARD adapter folder named by `--drafter` is trained
  on (not stacked under a second adapter, which its config could not load), and the run's adapter folder loads
  as the drafter.
"""

from __future__ import annotations

from typing import ClassVar

from transformers import PreTrainedModel

from ..models.loading import saved_kind
from ..models.pard import PardDrafter
from ..models.registry import head_of
from .config import DrafterTrainingConfig
from .pard import PardTrainer
from .specopd import SpecOPDTrainer


def names_a_pard_drafter(name_or_path: str | None) -> bool:
    """Whether `name_or_path` (a folder or Hub id) holds a drafter of the PARD kind or a kind built on it (read
    from its config alone; a name that cannot be read is left to the loading that reports it)."""
    kind = saved_kind(name_or_path) if name_or_path else None
    return kind is not None and issubclass(kind.model_class, PardDrafter)


class PardSpecOPDTrainer(SpecOPDTrainer, PardTrainer):
    """`SpecOPDTrainer` on a PARD drafter (`--objective specopd --drafter <a PARD drafter>`): SpecOPD's loss and
    counters, PARD's loading, checkpoints (trainable tensors only) and adapter folder."""

    objective: ClassVar[str] = "specopd"

    @classmethod
    def build_drafter(cls, config: DrafterTrainingConfig, target: PreTrainedModel) -> PardDrafter:
        drafter = super().build_drafter(config, target)  # PardTrainer's: SpecOPDTrainer has none of its own
        head = head_of(drafter)
        if head is not None:
            raise ValueError(
                f"--drafter {config.drafter} is a PardDrafter with a {head.name} head, a head on a PARD drafter: "
                "SpecOPD trains "
                "the PARD drafter itself. Pass the PARD drafter the head sits on (its config's `backbone`), or train "
                "the head with scripts/train_dcoco_head.py or scripts/train_dblast_head.py"
            )
        return drafter


__all__ = ["PardSpecOPDTrainer", "names_a_pard_drafter"]

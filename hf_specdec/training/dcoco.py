"""Training a DCOCO head on a frozen drafter of any base (teacher-forced candidate selection).

For every packed training block, the base drafts all slots; each slot keeps its top-K candidates. The corrector
scores the candidates of slot s + 1 given the *true* token at slot s (the anchor for slot 1), with the decoding
path's own scoring (`ContextualCorrector.teacher_forced_scores`), and the loss is the position-weighted cross-entropy
of the target's token among them (`dcoco_selection_loss`). Slots whose target token is not among the K candidates
are skipped; how often it is (candidate recall) is reported.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from .config import DCOCOHeadTrainingConfig
from .data import TrainingSequence
from .losses import dcoco_selection_loss, position_weights
from .trainer import DrafterTrainer, load_with_head


class DCOCOHeadTrainer(DrafterTrainer):
    """`DrafterTrainer` with the DCOCO head's loss; the base is frozen unless `config.joint`."""

    objective = "dcoco_head"
    supervised_key = "supervised_slots"

    @classmethod
    def build_drafter(cls, config: DCOCOHeadTrainingConfig, target: PreTrainedModel) -> PreTrainedModel:
        return load_with_head(config, "dcoco", corrector_candidates=config.corrector_candidates).to(target.device)

    def __init__(
        self,
        config: DCOCOHeadTrainingConfig,
        target: PreTrainedModel,
        drafter: PreTrainedModel,
        sequences: list[TrainingSequence],
    ) -> None:
        if not config.joint:
            drafter.requires_grad_(False)
            drafter.corrector.requires_grad_(True)
        super().__init__(config, target, drafter, sequences)
        self.state.update(labelled_slots=0, slots_in_candidates=0)

    def sequence_loss(self, seq: TrainingSequence, rng: torch.Generator) -> tuple[torch.Tensor, int]:
        K, dev = self.drafter.config.block_size, self.device
        with torch.set_grad_enabled(self.config.joint):
            anchors, packed, hidden = self.packed_pass(seq, rng)  # (n, K, H)
            unary = self.slot_logits(hidden[:, 1:])  # (n, K-1, Vd)
        n, corrector = len(anchors), self.drafter.corrector
        logq, _, ids = corrector.top_candidates(unary, self.drafter.draft_vocab)  # (n, K-1, Kc) each
        labels = packed.labels.to(dev)  # (n, K) full ids, -100 unsupervised
        truth = labels[:, 1:]  # (n, K-1) the target's token at slots 1..K-1
        prev = torch.cat([packed.block_ids.view(n, K)[:, :1].to(dev), truth[:, :-1]], dim=1)  # (n, K-1)
        hit = ids == truth[..., None]  # (n, K-1, Kc)
        found = hit.any(-1) & (truth >= 0)
        target_index = torch.where(found & (prev >= 0), hit.float().argmax(-1), torch.full_like(truth, -100))
        self.state["labelled_slots"] += int((truth >= 0).sum())
        self.state["slots_in_candidates"] += int(found.sum())

        h = hidden.float() if not self.autocast else hidden
        scores = corrector.teacher_forced_scores(h, logq, ids, prev.clamp_min(0), self.embed)  # (n, K-1, Kc)
        N = n * (K - 1)
        weights = position_weights(K, self.gamma, device=dev)[1:].repeat(n)  # (N,)
        return dcoco_selection_loss(scores.view(N, -1), target_index.view(N), weights), int((target_index >= 0).sum())

    @property
    def candidate_recall(self) -> float:
        return self.state["slots_in_candidates"] / max(1, self.state["labelled_slots"])

    def log_extras(self) -> dict:
        corrector = sum(p.numel() for p in self.drafter.corrector.parameters())
        return {"corrector_parameters": corrector, "candidate_recall": self.candidate_recall}


CorrectorTrainer = DCOCOHeadTrainer  # the name earlier releases used

__all__ = ["CorrectorTrainer", "DCOCOHeadTrainer"]

"""Training the DCOCO corrector on a frozen backbone, a block drafter or a PARD drafter (teacher-forced candidate
selection).

For every packed training block, the backbone drafts all slots; each slot keeps its top-K candidates. The
corrector scores the candidates of slot s + 1 given the *true* token at slot s (the anchor for slot 1), and the
loss is the position-weighted cross-entropy of the target's token among them (`dcoco_selection_loss`). Slots
whose target token is not among the K candidates are skipped; how often it is (candidate recall) is reported.
"""

from __future__ import annotations

import torch
from transformers import AutoConfig, PreTrainedModel

from ..models.block_drafter.modeling_block_drafter import BlockDrafter
from ..models.dcoco.configuration_dcoco import DCOCOConfig
from ..models.dcoco.modeling_dcoco import DCOCODrafter
from ..models.loading import load_drafter
from ..models.pard import PardConfig
from ..models.pard_dcoco import PardDCOCOConfig, PardDCOCODrafter
from .config import CorrectorTrainingConfig
from .data import TrainingSequence
from .losses import dcoco_selection_loss, position_weights
from .trainer import DrafterTrainer


class CorrectorTrainer(DrafterTrainer):
    """`DrafterTrainer` with the corrector's loss; the backbone is frozen unless `config.joint`."""

    objective = "dcoco_corrector"
    supervised_key = "supervised_slots"

    @classmethod
    def build_drafter(cls, config: CorrectorTrainingConfig, target: PreTrainedModel) -> DCOCODrafter | PardDCOCODrafter:
        return load_dcoco(config).to(target.device)

    def __init__(
        self,
        config: CorrectorTrainingConfig,
        target: PreTrainedModel,
        drafter: DCOCODrafter,
        sequences: list[TrainingSequence],
    ) -> None:
        if not config.joint:
            drafter.requires_grad_(False)
            drafter.corrector.requires_grad_(True)
        super().__init__(config, target, drafter, sequences)
        self.state.update(labelled_slots=0, slots_in_candidates=0)

    def sequence_loss(self, seq: TrainingSequence, rng: torch.Generator) -> tuple[torch.Tensor, int]:
        drafter, K, dev = self.drafter, self.drafter.config.block_size, self.device
        with torch.set_grad_enabled(self.config.joint):
            anchors, packed, hidden = self.packed_pass(seq, rng)  # (n, K, H)
            unary = self.slot_logits(hidden[:, 1:])  # (n, K-1, Vd)
        n = len(anchors)
        Kc = min(self.config.corrector_candidates, unary.shape[-1])
        logq, index = unary.float().log_softmax(dim=-1).topk(Kc, dim=-1)  # (n, K-1, Kc)
        ids = index if drafter.draft_vocab is None else drafter.draft_vocab.to(dev)[index]
        labels = packed.labels.to(dev)  # (n, K) full ids, -100 unsupervised
        truth = labels[:, 1:]  # (n, K-1) the target's token at slots 1..K-1
        prev = torch.cat([packed.block_ids.view(n, K)[:, :1].to(dev), truth[:, :-1]], dim=1)  # (n, K-1)
        hit = ids == truth[..., None]  # (n, K-1, Kc)
        found = hit.any(-1) & (truth >= 0)
        target_index = torch.where(found & (prev >= 0), hit.float().argmax(-1), torch.full_like(truth, -100))
        self.state["labelled_slots"] += int((truth >= 0).sum())
        self.state["slots_in_candidates"] += int(found.sum())

        N, corrector = n * (K - 1), drafter.corrector
        h = hidden.float() if not self.autocast else hidden
        cand = corrector.candidates(self.embed(ids).to(h.dtype).view(N, Kc, -1), h[:, 1:].reshape(N, -1))
        pred = corrector.candidates(self.embed(prev.clamp_min(0)).to(h.dtype).view(N, 1, -1), h[:, :-1].reshape(N, -1))
        pairs = corrector.left_proj(h[:, :-1].reshape(N, -1)) + corrector.right_proj(h[:, 1:].reshape(N, -1))
        scores = logq.view(N, Kc) + corrector.transitions(pred, cand, pairs)[:, 0].float()  # (N, Kc)
        weights = position_weights(K, self.gamma, device=dev)[1:].repeat(n)  # (N,)
        return dcoco_selection_loss(scores, target_index.view(N), weights), int((target_index >= 0).sum())

    @property
    def candidate_recall(self) -> float:
        return self.state["slots_in_candidates"] / max(1, self.state["labelled_slots"])

    def log_extras(self) -> dict:
        corrector = sum(p.numel() for p in self.drafter.corrector.parameters())
        return {"corrector_parameters": corrector, "candidate_recall": self.candidate_recall}


def load_dcoco(config: CorrectorTrainingConfig) -> DCOCODrafter | PardDCOCODrafter:
    """The drafter to train (float32): a saved one with a corrector, or a block drafter or a PARD drafter given a
    fresh corrector."""
    model_type = AutoConfig.from_pretrained(config.drafter).model_type
    if model_type in (DCOCOConfig.model_type, PardDCOCOConfig.model_type):
        return load_drafter(config.drafter, dtype=torch.float32)
    if model_type == PardConfig.model_type:
        base = load_drafter(config.drafter, dtype=torch.float32)
        torch.manual_seed(config.seed)
        return PardDCOCODrafter.from_pard(base, corrector_candidates=config.corrector_candidates)
    base = BlockDrafter.from_pretrained(config.drafter, dtype=torch.float32)
    torch.manual_seed(config.seed)
    return DCOCODrafter.from_block_drafter(base, corrector_candidates=config.corrector_candidates)


__all__ = ["CorrectorTrainer", "load_dcoco"]

"""Training a PARD drafter: a same-family causal LM learns to draft a block with mask tokens (docs/pard.md).

One sequence of T tokens becomes one packed pass (PARD's layout): the T real tokens (depth 0), then for depth
d = 1..K-1 the kept mask copies; the copy at slot t and depth d has position t, its anchor is a = t - d, it sees
the real tokens 0..a and the same anchor's copies at depths 1..d, and it is supervised with the label of slot t
(the target's greedy choice after position t): the token d + 1 places after its anchor.
Conditional drop keeps at depth d a random share max(r^d, floor) of the slots whose depth d-1 copy one slot earlier
was kept, so every kept copy's chain of earlier masks is there too.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, PreTrainedModel

from ..models.base_models import missing_base_hint, resolve_base_model
from ..models.block_drafter import build_target_layer_ids
from ..models.loading import load_drafter
from ..models.pard import PardDrafter
from ..models.pard.layout import PardLayout, conditional_drop_layout, layout_features
from .checkpoint import TrainableOnly
from .config import PardTrainingConfig
from .data import TrainingSequence
from .trainer import DrafterTrainer


class PardTrainer(DrafterTrainer):
    """Cross-entropy of every kept element against the target's greedy choice at its slot (teacher-forced, cached
    with the sequences), LoRA on the LM plus the mask token's embedding row, or full fine-tuning."""

    objective: ClassVar[str] = "pard"

    @classmethod
    def adapter_to_continue(cls, config: PardTrainingConfig) -> str | None:
        """`config.drafter` when it is a PARD adapter folder and the run trains LoRA: its config names the causal LM
        under it, not the folder, so a second adapter on top would be lost on loading; the run trains this one on
        and saves it whole (a shipped adapter trained further, here or on another machine)."""
        if config.lora_rank and config.drafter and PardDrafter.is_adapter_folder(config.drafter):
            return config.drafter
        return None

    @classmethod
    def build_drafter(cls, config: PardTrainingConfig, target: PreTrainedModel) -> PardDrafter:
        """The drafter to train in float32: `config.drafter` when given, else `config.base_lm` with a mask token; under
        an adapter that the run goes on training (`adapter_to_continue`), the base alone (the adapter goes on top)."""
        if cls.adapter_to_continue(config):
            drafter = PardDrafter.from_adapter_folder(config.drafter, dtype=torch.float32, merge=False)
        elif config.drafter:
            drafter = load_drafter(config.drafter, dtype=torch.float32)
        else:
            where = resolve_base_model(config.base_lm)
            try:
                lm = AutoModelForCausalLM.from_pretrained(where, dtype=torch.float32)
            except OSError as err:
                raise OSError(missing_base_hint(config.base_lm)) from err
            mask = config.mask_token_id if config.mask_token_id is not None else lm.config.vocab_size - 1
            drafter = PardDrafter.from_causal_lm(
                lm,
                target,
                mask_token_id=mask,
                block_size=config.block_size,
                base_model=config.base_lm,
                num_target_taps=config.num_target_taps,
                target_name_or_path=config.target,
            )
        if config.kept_layers is not None:  # the cheaper draft: some of the LM's layers, trained on (docs/pard.md 5.6)
            kept = config.kept_layers
            drafter.keep_layers(kept[0] if len(kept) == 1 else list(kept))  # one number: a count
        if config.feature_injection and drafter.feature_proj is None:  # PARD-2 on a drafter that had no features
            depth = target.config.get_text_config().num_hidden_layers
            layers = config.feature_layers or build_target_layer_ids(depth, config.num_target_taps)
            drafter.add_feature_injection(target.config, layers, scale=config.feature_scale)
        return drafter.to(device=target.device, dtype=torch.float32)

    def sequence_loss(self, seq: TrainingSequence, rng: torch.Generator) -> tuple[torch.Tensor, int]:
        """Mean cross-entropy of one sequence's packed pass, and how many labels it had."""
        cfg, dev = self.drafter.config, self.device
        T = seq.ids.shape[0]
        layout = conditional_drop_layout(T, cfg.block_size, self.config.cod_ratio, self.config.cod_floor, rng)
        ids = layout.input_ids(seq.ids, cfg.mask_token_id).to(dev)[None]  # (1, N)
        labels_by_slot = seq.ids[1:] if seq.next_tokens is None else seq.next_tokens[:-1]  # (T-1,) label of slot t
        labels = torch.full_like(layout.slot, -100)  # (N,)
        ok = (layout.slot < T - 1) & (layout.slot >= seq.loss_start - 1)
        labels[ok] = labels_by_slot[layout.slot[ok]]
        features = self.injected_features(seq, layout, rng)  # (1, N, L*H) or None
        hidden = self.drafter(
            ids,
            position_ids=layout.slot.to(dev)[None],
            attention_mask=layout.additive_mask(dev, self.drafter.dtype),
            features=features,
        ).last_hidden_state[0]  # (N, H)
        rows = labels != -100
        logits = self.drafter.get_output_embeddings()(hidden[rows.to(dev)])  # (n, V)
        return F.cross_entropy(logits.float(), labels[rows].to(dev)), int(rows.sum())

    def injected_features(self, seq: TrainingSequence, layout: PardLayout, rng: torch.Generator):
        """(1, N, L*H) features of the token before each element's input (masks: their anchor's), zero for the whole
        sequence with probability feature_dropout; None without feature injection."""
        if self.drafter.feature_proj is None:
            return None
        if float(torch.rand((), generator=rng)) < self.config.feature_dropout:
            return None
        return layout_features(seq.features, layout).to(self.device, self.drafter.dtype)[None]

    def checkpointed(self) -> TrainableOnly:
        """LoRA on a 0.5B model: checkpoints hold the trainable tensors only (megabytes, not gigabytes); saved and
        resumed (with the checks on arguments, data and damaged files) as any trainer's."""
        return TrainableOnly(self.drafter)


__all__ = ["PardLayout", "PardTrainer", "conditional_drop_layout"]

"""Training a DBLAST head for expected verified length, on a frozen drafter of any base.

The target's distribution at every training position (at the sampling temperature, top-m renormalised) is
computed once and cached next to the features. Each step packs blocks like the DFlash recipe; along the data's
own tokens (teacher prefixes) it computes the mixture's exact conditionals q(x_s | x_<s) and minimises
    1 - (1/k) sum_j prod_{s<=j} sum_v min(p_s, q_s)          (expected verified length, `expected_verified_length_loss`)
  + nll_weight * -log q(block)                               (keeps components in use, gives gradient at low overlap)
  + balance_weight * KL(mean pi || uniform)
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm
from transformers import PreTrainedModel

from ..models.heads.dblast.mixture import component_log_q, mixture_conditionals
from .config import DBLASTHeadTrainingConfig
from .data import TrainingSequence
from .losses import expected_verified_length_loss, mixture_nll
from .sequences import data_folder
from .trainer import DrafterTrainer, load_with_head


@torch.no_grad()
def cache_target_probs(
    target: PreTrainedModel, sequences: list[TrainingSequence], folder: Path, temperature: float, top_m: int
) -> list[tuple[torch.Tensor, torch.LongTensor]]:
    """Per sequence: (T, m) top-m target probabilities at `temperature` after each position, renormalised, and their
    ids. One cache-less target forward per sequence, written to `folder` one file per sequence (resumable)."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i, seq in enumerate(tqdm(sequences, desc="target probabilities", unit="seq")):
        path = folder / f"{i:05d}.safetensors"
        if not path.exists():
            hidden = target.base_model(seq.ids[None].to(target.device)).last_hidden_state[0]  # (T, H)
            logits = target.get_output_embeddings()(hidden).float() / temperature  # (T, V) 2-D: the fast CPU path
            probs, ids = torch.softmax(logits, dim=-1).topk(top_m, dim=-1)
            tmp = path.with_name(path.name + ".tmp")
            save_file({"probs": (probs / probs.sum(-1, keepdim=True)).cpu(), "ids": ids.cpu()}, str(tmp))
            tmp.rename(path)
        tensors = load_file(str(path))
        out.append((tensors["probs"], tensors["ids"]))
    return out


class DBLASTHeadTrainer(DrafterTrainer):
    """`DrafterTrainer` with the DBLAST head's loss; only the head is trained."""

    objective = "dblast_head"
    supervised_key = "supervised_slots"

    @classmethod
    def build_drafter(cls, config: DBLASTHeadTrainingConfig, target: PreTrainedModel) -> PreTrainedModel:
        shape = {"mixture_components": config.mixture_components, "mixture_rank": config.mixture_rank}
        return load_with_head(config, "dblast", **shape).to(target.device)

    @classmethod
    def for_run(cls, config: DBLASTHeadTrainingConfig, target, drafter, sequences) -> DBLASTHeadTrainer:
        """The trainer, with the target's top-m probabilities cached next to the sequences' features."""
        folder = data_folder(config) / f"p-T{config.temperature:g}-m{config.top_m}"
        probs = cache_target_probs(target, sequences, folder, config.temperature, config.top_m)
        return cls(config, target, drafter, sequences, probs)

    def __init__(self, config, target, drafter: PreTrainedModel, sequences, target_probs) -> None:
        drafter.requires_grad_(False)
        drafter.mixture_head.requires_grad_(True)
        super().__init__(config, target, drafter, sequences)
        self.target_probs = target_probs
        self.index_of = {id(seq): i for i, seq in enumerate(sequences)}
        vocab = self.head_weight.shape[0]
        self.to_draft = self.label_index if self.label_index is not None else torch.arange(vocab, device=self.device)

    def sequence_loss(self, seq: TrainingSequence, rng: torch.Generator) -> tuple[torch.Tensor, int]:
        drafter, K, dev = self.drafter, self.drafter.config.block_size, self.device
        T = seq.ids.shape[0]
        with torch.no_grad():
            anchors, _, hidden = self.packed_pass(seq, rng)  # (n, K, H)
            unary = self.slot_logits(hidden[:, 1:]).float()  # (n, k, Vd)
        log_pi, offsets = drafter.mixture_head(hidden[:, 0], hidden[:, 1:])  # (n, R), (n, k, R, Vd)
        logq = component_log_q(unary, offsets, self.config.temperature)  # (n, k, R, Vd)

        pos = anchors[:, None] + torch.arange(1, K)  # (n, k) positions of the drafted tokens
        inside = (pos < T) & (pos >= seq.loss_start)
        tokens = self.to_draft[seq.ids[pos.clamp(max=T - 1)].to(dev)]  # (n, k) draft-vocab ids, -100 outside
        valid = inside.to(dev) & (tokens >= 0)
        tokens = tokens.clamp_min(0)
        q = mixture_conditionals(log_pi, logq, tokens[:, None])[:, 0]  # (n, k, Vd) exact conditionals

        probs, ids = self.target_probs[self.index_of[id(seq)]]
        rows = (pos - 1).clamp(max=T - 1)  # p of the token at pos comes from the position before it
        p_ids = self.to_draft[ids[rows].to(dev)]  # (n, k, m)
        p = q.new_zeros(q.shape).scatter_add_(2, p_ids.clamp_min(0), probs[rows].to(dev) * (p_ids >= 0))

        loss = expected_verified_length_loss(p, q, valid)
        loss = loss + self.config.nll_weight * mixture_nll(log_pi, logq, tokens, valid)
        mean_pi = log_pi.exp().mean(0)
        balance = (mean_pi * (mean_pi.clamp_min(1e-9).log() + math.log(mean_pi.shape[0]))).sum()
        return loss + self.config.balance_weight * balance, int(valid.sum())

    def log_extras(self) -> dict:
        return {"head_parameters": sum(p.numel() for p in self.drafter.mixture_head.parameters())}


MixtureTrainer = DBLASTHeadTrainer  # the name earlier releases used

__all__ = ["DBLASTHeadTrainer", "MixtureTrainer", "cache_target_probs"]

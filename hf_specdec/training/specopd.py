"""SpecOPD: on-policy distillation of a drafter with proposal trees scored by one tree-masked target pass.

Per training sequence (docs/specopd.md section 2):
  1. the drafter runs over the trunk's packed anchor blocks (DFlash multi-anchor pass, with gradients);
  2. at `tree_anchors` of those anchors it draws M branches from its current policy (no gradients);
  3. branches are merged into tries and packed with the trunk (`pack_proposal_trees`); ONE cache-less target
     forward with the tree mask gives the teacher p at every distinct proposal state;
  4. q along every branch comes from the same drafter pass (predecessor-conditioned for DCOCO and DBLAST);
  5. loss = E2E-TV over the branches + ce_weight * DFlash cross-entropy on all trunk anchors.
The drafter's context features always come from the trunk (committed text), as at inference.
"""

from __future__ import annotations

import contextlib
import math
import time

import torch
from transformers import PreTrainedModel

from ..models.lm_head_strides import fix_lm_head_strides
from ..models.registry import policy_class_for
from ..verification.tree import mask_for_attention
from .data import TrainingSequence
from .losses import dflash_decayed_cross_entropy, expected_verified_length_loss
from .proposal_trees import alive_after_eos, pack_proposal_trees
from .trainer import DrafterTrainer


@torch.no_grad()
def teacher_probs(
    target: PreTrainedModel,
    hidden: torch.Tensor,
    draft_vocab: torch.LongTensor | None,
    temperature: float,
    chunk: int = 256,
) -> torch.Tensor:
    """(R, Vd) target next-token probabilities at `temperature` of (R, H) final hidden states, on the drafter's
    vocabulary (softmax over the full vocabulary, then the draft columns: mass outside is never accepted)."""
    head = target.get_output_embeddings()
    out = []
    for rows in hidden.split(chunk):
        logits = head(rows).float() / temperature  # (r, V)
        probs = torch.softmax(logits, dim=-1)
        out.append(probs if draft_vocab is None else probs[:, draft_vocab.to(probs.device)])
    return torch.cat(out) if out else hidden.new_zeros(0, 0).float()


def eos_ids(target: PreTrainedModel) -> torch.LongTensor:
    eos = target.generation_config.eos_token_id
    eos = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    return torch.tensor(eos, dtype=torch.long)


class SpecOPDTrainer(DrafterTrainer):
    """`DrafterTrainer` with the SpecOPD loss; works for block, DCOCO and DBLAST drafters (full or LoRA; a PARD
    drafter: `pard_specopd.PardSpecOPDTrainer`).

    The loss is `e2e_tv + ce_weight * trunk_ce`; each term's mean over a step's sequences (this process's) is kept
    by name in state["loss_terms"] ({name: [[step, value], ...]}, like the `losses` curve), shown in the progress bar
    and written to training_log.json.
    """

    objective = "specopd"
    loss_term_names = ("e2e_tv", "trunk_ce")

    def __init__(self, config, target, drafter, sequences) -> None:
        super().__init__(config, target, drafter, sequences)
        vocab = target.get_output_embeddings().weight.shape[0]
        self.to_draft = self.label_index if self.label_index is not None else torch.arange(vocab, device=self.device)
        self.policy = policy_for(drafter, self.embed, config.temperature, self.to_draft)
        self.eos = eos_ids(target)
        fix_lm_head_strides(target)  # the frozen head's slow CPU path on strided inputs (see lm_head_strides.py)
        self.state["loss_terms"] = {name: [] for name in self.loss_term_names}
        self.step_terms: dict[str, list[float]] = {}  # the step under way: each term per sequence

    def log_extras(self) -> dict:
        return {"loss_terms": named_loss_terms(self.state["loss_terms"], self.loss_term_names)}

    def train_step(self) -> float:
        self.step_terms = {name: [] for name in self.loss_term_names}
        loss = super().train_step()
        if math.isfinite(loss):  # a skipped step changed nothing: no terms either
            if not isinstance(self.state["loss_terms"], dict):  # resumed from a checkpoint of unnamed terms
                self.state["loss_terms"] = named_loss_terms(self.state["loss_terms"], self.loss_term_names)
            for name, values in self.step_terms.items():
                if values:
                    curve = self.state["loss_terms"].setdefault(name, [])
                    curve.append([self.state["step"] + 1, sum(values) / len(values)])
        return loss

    def loss_term_postfix(self) -> dict[str, str]:
        step = self.state["step"]
        terms = self.state["loss_terms"]
        return {name: f"{curve[-1][1]:.3f}" for name, curve in terms.items() if curve and curve[-1][0] == step}

    @contextlib.contextmanager
    def timed(self, key: str):
        """Add the wall time of the block to state[key] (synchronising CUDA so the time is the device's)."""
        sync = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)
        sync()
        start = time.perf_counter()
        yield
        sync()
        self.state[key] += time.perf_counter() - start

    def full_ids(self, tokens: torch.LongTensor) -> torch.LongTensor:
        vocab = self.drafter.draft_vocab
        return tokens if vocab is None else vocab.to(tokens.device)[tokens]

    def sequence_loss(self, seq: TrainingSequence, rng: torch.Generator) -> tuple[torch.Tensor, int]:
        cfg, dev = self.config, self.device
        # 1) the drafter's pass over the trunk's anchors (gradients on)
        anchors, packed, hidden = self.packed_pass(seq, rng)  # (n, K, H)
        logits = self.slot_logits(hidden)  # (n, K, Vd)
        labels = packed.labels.to(dev)
        if self.label_index is not None:
            labels = torch.where(labels == -100, labels, self.label_index[labels.clamp_min(0)])
        ce = dflash_decayed_cross_entropy(logits, labels, self.gamma)
        # 2) branches from the current policy at a random subset of the anchors
        pick = torch.randperm(len(anchors), generator=rng)[: cfg.tree_anchors].sort().values
        tree_anchors = anchors[pick]
        scores = self.policy.scores(hidden[pick], logits[pick], seq.ids[tree_anchors])
        tokens = self.policy.draw(scores, cfg.branches, rng).cpu()  # (n, M, k) draft-vocabulary indices
        full = self.full_ids(tokens)
        # 3) one tree-masked target pass over [trunk | tries]
        trees = pack_proposal_trees(seq.ids, tree_anchors, full)
        p = self.teacher(trees)  # (n, M, k, Vd)
        # 4) q along every branch, 5) the loss
        q = self.policy.path_q(scores, tokens.to(dev))  # (n, M, k, Vd)
        valid = alive_after_eos(full, self.eos).to(dev)
        n, M, k = tokens.shape
        e2e = expected_verified_length_loss(p.reshape(n * M, k, -1), q.reshape(n * M, k, -1), valid.reshape(n * M, k))
        self.state["trunk_labels"] += int((labels != -100).sum())
        self.state["target_tokens"] += len(trees.input_ids)
        self.state["target_passes"] += 1
        self.state["branch_tokens"] += n * M * k
        self.step_terms.setdefault("e2e_tv", []).append(float(e2e.detach()))
        self.step_terms.setdefault("trunk_ce", []).append(float(ce.detach()))
        return e2e + cfg.ce_weight * ce, trees.supervised

    def teacher(self, trees) -> torch.Tensor:
        """(n, M, k, Vd) teacher p of every branch token, from one cache-less tree-masked target forward."""
        target = self.target
        impl = target.config._attn_implementation
        allowed = trees.allowed.to(target.device)
        mask = mask_for_attention(allowed, impl, target.dtype)
        with torch.no_grad(), self.timed("target_seconds"):
            hidden = target.base_model(
                input_ids=trees.input_ids[None].to(target.device),
                position_ids=trees.position_ids[None].to(target.device),
                attention_mask=mask,
                use_cache=False,
            ).last_hidden_state[0]  # (T + N, H)
        rows, where = trees.teacher_rows.unique(return_inverse=True)  # (R,), (n, M, k)
        with self.timed("target_seconds"):
            probs = teacher_probs(
                target, hidden[rows.to(hidden.device)], self.drafter.draft_vocab, self.config.temperature
            )
        return probs.to(self.device)[where.to(self.device)]


def named_loss_terms(terms: dict | list, names: tuple[str, ...]) -> dict[str, list]:
    """{name: [[step, value], ...]}; a checkpoint from before terms had names ([step, e2e_tv, trunk_ce] per sequence)
    is read as that."""
    if isinstance(terms, dict):
        return {name: list(terms.get(name, [])) for name in names}
    return {name: [[row[0], row[i + 1]] for row in terms] for i, name in enumerate(names)}


def policy_for(drafter, embed: torch.nn.Module, temperature: float, to_draft: torch.Tensor):
    """The on-policy strategy of `drafter`: its head's when it carries one, else its base's (the registry's)."""
    policy_class = policy_class_for(drafter)
    if policy_class is None:
        raise TypeError(
            f"{type(drafter).__name__} is not a registered drafter kind with a policy; register it with "
            "hf_specdec.register_drafter_kind(..., policy_class=...)"
        )
    return policy_class(drafter, embed, temperature, to_draft)


__all__ = ["SpecOPDTrainer", "eos_ids", "named_loss_terms", "policy_for", "teacher_probs"]

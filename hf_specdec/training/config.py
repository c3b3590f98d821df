"""Training settings, typed and validated (HfArgumentParser reads the field help texts)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from transformers import HfArgumentParser


@dataclass
class DrafterTrainingConfig:
    """How to train a block drafter for a frozen target with the DFlash objective.

    The class of a config is its objective: `hf_specdec.training.run.run` picks the trainer from it (`TRAINERS`).
    """

    script: ClassVar[str] = "scripts/train_drafter.py"  # the command line that parses this class (recipes, cards)
    # help of the `--no_<name>` flag of each boolean that defaults to True (`argument_parser`)
    negative_help: ClassVar[dict[str, str]] = {
        "continue_prompts": "teacher-force the corpus' own texts instead of target continuations (fast on a CPU; "
        "pair with --label_source target_argmax)",
        "resume": "start afresh even if output_dir/checkpoint holds a checkpoint (it is overwritten at the first save)",
    }

    target: str = field(metadata={"help": "target model folder or Hub id (frozen during training)"})
    output_dir: str = field(metadata={"help": "where checkpoints and the final drafter go"})
    data_file: str | None = field(
        default=None,
        metadata={
            "help": "jsonl of training items: {'messages': [...]}, {'prompt': str} or {'ids': [...], "
            "'loss_start': int}; prompts get target-generated continuations"
        },
    )
    corpus: list[str] = field(
        default_factory=lambda: ["sharegpt", "stdlib"],
        metadata={"help": "built-in prompt sources used when no data_file is given: sharegpt, stdlib"},
    )
    data_dir: str | None = field(
        default=None,
        metadata={
            "help": "folder of cached continuations + target features (default: output_dir/data); reuse "
            "another run's data by pointing here with the same data settings"
        },
    )
    num_prompts: int = field(default=64, metadata={"help": "prompts to draw from the corpus"})
    continue_prompts: bool = field(
        default=True,
        metadata={
            "help": "train on the target's own continuations of the corpus prompts (the data drafters accept "
            "best); see --no_continue_prompts"
        },
    )
    label_source: str = field(
        default="tokens",
        metadata={"help": "tokens: the sequence's next tokens; target_argmax: the target's greedy choice there"},
    )
    draft_vocab_size: int | None = field(
        default=None, metadata={"help": "score only the N most frequent label tokens (fresh drafter)"}
    )
    max_new_tokens: int = field(default=256, metadata={"help": "length of each target-generated continuation"})
    generation_batch_size: int = field(default=16, metadata={"help": "prompts per generate() call (CUDA)"})
    max_length: int = field(default=1024, metadata={"help": "longest training sequence (tokens)"})
    drafter: str | None = field(default=None, metadata={"help": "drafter to start from; default: a fresh one"})
    block_size: int = field(default=8, metadata={"help": "drafting block incl. the anchor"})
    num_hidden_layers: int = field(default=1, metadata={"help": "drafter layers (fresh drafter)"})
    intermediate_size: int | None = field(default=None, metadata={"help": "drafter MLP width; default: target's"})
    num_target_taps: int = field(default=3, metadata={"help": "target layers the drafter reads (fresh drafter)"})
    mask_token_id: int | None = field(default=None, metadata={"help": "default: the target's pad token"})
    num_steps: int = field(default=1000, metadata={"help": "optimizer steps"})
    batch_size: int = field(default=4, metadata={"help": "sequences per optimizer step"})
    anchors_per_sequence: int = field(default=32, metadata={"help": "training blocks packed per sequence"})
    gamma: float | None = field(default=None, metadata={"help": "position-decay length; default ceil((K-1)/2)"})
    learning_rate: float = field(default=6e-4, metadata={"help": "AdamW peak learning rate"})
    warmup_ratio: float = field(default=0.04, metadata={"help": "linear warm-up share of num_steps"})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay"})
    max_grad_norm: float = field(default=1.0, metadata={"help": "gradient clipping norm"})
    save_every: int = field(default=100, metadata={"help": "checkpoint every N steps (and at the end)"})
    seed: int = field(default=0, metadata={"help": "seeds data order, anchors and init; resume is exact"})
    dtype: str = field(default="auto", metadata={"help": "target dtype: auto (bf16 on CUDA and CPU), float32"})
    device: str = field(default="auto", metadata={"help": "auto, cpu or cuda"})
    resume: bool = field(
        default=True,
        metadata={"help": "continue from output_dir/checkpoint when there is one; see --no_resume"},
    )
    target_quantization: str | None = field(
        default=None, metadata={"help": "load the frozen target in 8bit or 4bit with bitsandbytes (saves memory)"}
    )
    lora_rank: int = field(default=0, metadata={"help": "LoRA rank of the drafter's adapters; 0: full fine-tuning"})
    lora_alpha: float = field(default=16.0, metadata={"help": "LoRA scaling numerator (alpha / rank)"})
    lora_dropout: float = field(default=0.0, metadata={"help": "dropout on the LoRA path"})
    lora_target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        metadata={"help": "drafter module names that get adapters (peft target_modules)"},
    )
    export_only: bool = field(
        default=False,
        metadata={"help": "save the drafter (and adapter) of output_dir/checkpoint as it is, without training on"},
    )
    push_to_hub: str | None = field(
        default=None, metadata={"help": "Hub repo id (org/name) to publish the trained drafter and its card to"}
    )
    hub_target_id: str | None = field(
        default=None, metadata={"help": "the target's Hub id for the card's base_model (needed for a local target)"}
    )
    hub_target_revision: str | None = field(default=None, metadata={"help": "the target's Hub revision, if pinned"})
    license: str = field(
        default="apache-2.0", metadata={"help": "license of the published drafter (a Hub license id, e.g. mit)"}
    )
    benchmark: str | None = field(
        default=None,
        metadata={
            "help": "benchmark report attached to the published card: a scripts/benchmark.py output folder or "
            "its .md/.json file (without one the card says it has no measurements)"
        },
    )
    nonfinite: str = field(
        default="stop",
        metadata={
            "help": "a step whose loss or gradient is nan/inf applies nothing, then: stop (raise, naming the step and "
            "its sequences; the last checkpoint stays) or skip (log it and go on)"
        },
    )

    def __post_init__(self) -> None:
        positive = (
            "num_prompts",
            "max_new_tokens",
            "generation_batch_size",
            "max_length",
            "num_steps",
            "batch_size",
            "anchors_per_sequence",
            "save_every",
            "num_hidden_layers",
            "num_target_taps",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.block_size < 2:
            raise ValueError(f"block_size must be >= 2 (anchor + at least one draft), got {self.block_size}")
        if not 0 < self.learning_rate < 1:
            raise ValueError(f"learning_rate must be in (0, 1), got {self.learning_rate}")
        if not 0 <= self.warmup_ratio < 1:
            raise ValueError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        if self.gamma is not None and self.gamma <= 0:
            raise ValueError(f"gamma must be > 0, got {self.gamma}")
        if self.label_source not in ("tokens", "target_argmax"):
            raise ValueError(f"label_source must be tokens or target_argmax, got {self.label_source!r}")
        if self.draft_vocab_size is not None and self.draft_vocab_size < 2:
            raise ValueError(f"draft_vocab_size must be >= 2, got {self.draft_vocab_size}")
        if self.dtype not in ("auto", "bfloat16", "float32"):
            raise ValueError(f"dtype must be auto, bfloat16 or float32, got {self.dtype!r}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device must be auto, cpu or cuda, got {self.device!r}")
        if self.target_quantization not in (None, "8bit", "4bit"):
            raise ValueError(f"target_quantization must be 8bit or 4bit (or unset), got {self.target_quantization!r}")
        if self.lora_rank < 0 or self.lora_alpha <= 0 or not 0 <= self.lora_dropout < 1:
            raise ValueError("lora_rank must be >= 0 (0: full fine-tuning), lora_alpha > 0, lora_dropout in [0, 1)")
        if self.lora_rank and not self.lora_target_modules:
            raise ValueError("lora_target_modules is empty: name the drafter modules that get adapters")
        if self.push_to_hub is not None and self.push_to_hub.count("/") != 1:
            raise ValueError(f"--push_to_hub must be a Hub repo id 'org/name', got {self.push_to_hub!r}")
        if self.nonfinite not in ("stop", "skip"):
            raise ValueError(f"nonfinite must be stop or skip, got {self.nonfinite!r}")
        unknown = set(self.corpus) - {"sharegpt", "stdlib"}
        if unknown and self.data_file is None:
            raise ValueError(f"unknown --corpus {sorted(unknown)}; choose from sharegpt, stdlib or pass --data_file")

    def for_objective(self) -> DrafterTrainingConfig:
        """The config whose class picks the trainer: this one (`DistillationConfig` turns its `objective` into one)."""
        return self


@dataclass
class DCOCOHeadTrainingConfig(DrafterTrainingConfig):
    """Training of a DCOCO head on a trained drafter of any base (`drafter` is required)."""

    script: ClassVar[str] = "scripts/train_dcoco_head.py"
    corrector_candidates: int = field(default=16, metadata={"help": "K: candidates kept per drafted slot"})
    joint: bool = field(default=False, metadata={"help": "also train the backbone (default: corrector only)"})

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.drafter:
            raise ValueError("--drafter is required: the corrector is trained on top of a trained block drafter")
        if self.corrector_candidates < 1:
            raise ValueError(f"corrector_candidates must be >= 1, got {self.corrector_candidates}")


@dataclass
class DBLASTHeadTrainingConfig(DrafterTrainingConfig):
    """Training of a DBLAST head on a trained drafter of any base (`drafter` is required)."""

    script: ClassVar[str] = "scripts/train_dblast_head.py"
    mixture_components: int = field(default=8, metadata={"help": "R: latent components"})
    mixture_rank: int = field(default=64, metadata={"help": "r: rank of each component's logit offset"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature the head is trained for"})
    top_m: int = field(default=64, metadata={"help": "target probabilities cached per position (top-m, renormalised)"})
    nll_weight: float = field(default=0.1, metadata={"help": "weight of the mixture likelihood term"})
    balance_weight: float = field(default=0.01, metadata={"help": "weight of KL(mean pi || uniform)"})

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.drafter:
            raise ValueError("--drafter is required: the mixture head is trained on top of a trained block drafter")
        if self.mixture_components < 1 or self.mixture_rank < 1 or self.top_m < 1:
            raise ValueError("mixture_components, mixture_rank and top_m must be >= 1")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0 (the sampling temperature), got {self.temperature}")
        if self.nll_weight < 0 or self.balance_weight < 0:
            raise ValueError("nll_weight and balance_weight must be >= 0")
        if self.draft_vocab_size is not None:
            raise ValueError(
                "draft_vocab_size does not apply to a mixture head (it is sized when the head is made): train the head "
                "on a drafter that already has its draft vocabulary"
            )


@dataclass
class DistillationConfig(DrafterTrainingConfig):
    """How scripts/train_drafter.py distils a drafter (block, DCOCO or DBLAST) from its target.

    dflash: teacher-forced DFlash cross-entropy on cached target text (the recipe for a fresh drafter).
    specopd: on-policy, E2E-TV loss on branches of the drafter's own policy packed into proposal trees, scored by
        one tree-masked target pass per sequence, plus ce_weight x the DFlash loss on the trunk.
    sequential_opd: the on-policy baseline (draft, verify, commit, supervise; one target pass per block).
    pard: a PARD drafter adapted from `base_lm` (a same-family causal LM): cross-entropy against the target's greedy
        choices with conditional drop over mask depths (docs/pard.md); LoRA trains the mask token's embedding too.

    `objective` is the command-line name of a subclass (`OBJECTIVES`: DFlashConfig, SpecOPDConfig,
    SequentialOPDConfig); `for_objective` gives this config as that class, which picks the trainer.
    """

    objective: str = field(default="dflash", metadata={"help": "dflash, specopd, sequential_opd or pard"})
    branches: int = field(default=4, metadata={"help": "M: branches drawn per anchor (argmax path + samples)"})
    tree_anchors: int = field(default=8, metadata={"help": "anchors per sequence that get proposal trees"})
    temperature: float = field(default=1.0, metadata={"help": "temperature of the teacher p and of branch sampling"})
    ce_weight: float = field(default=0.1, metadata={"help": "weight of the DFlash cross-entropy on trunk anchors"})
    rollout_rounds: int = field(
        default=8, metadata={"help": "sequential_opd: speculative steps rolled out per sequence per optimizer step"}
    )
    base_lm: str = field(
        default="qwen2.5-coder-0.5b",
        metadata={"help": "pard: the same-family causal LM to adapt (folder, offline model name or Hub id)"},
    )
    cod_ratio: float = field(default=0.7, metadata={"help": "pard: conditional drop keeps max(r^d, floor) at depth d"})
    cod_floor: float = field(default=0.2, metadata={"help": "pard: the least share of slots kept at any depth"})
    feature_injection: bool = field(
        default=False, metadata={"help": "pard: add projected target features to the input embeddings (PARD-2)"}
    )
    feature_dropout: float = field(
        default=0.2, metadata={"help": "pard: share of sequences trained without features (injection only)"}
    )
    feature_layers: list[int] | None = field(
        default=None,
        metadata={
            "help": "pard: target layers whose features are injected, in concatenation order; negative from the end "
            "(-1: the post-norm last state), as PARD-2's pard2_target_layers; default: --num_target_taps layers"
        },
    )
    feature_scale: float = field(default=0.02, metadata={"help": "pard: scale of the projected features (PARD-2)"})
    kept_layers: list[int] | None = field(
        default=None,
        metadata={
            "help": "pard: the drafter LM's decoder layers to keep, increasing ids (e.g. 0 1 ... 7 16 ... 23), or "
            "one count N for the first N: a cheaper draft, trained on (docs/pard.md 5.6)"
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {sorted(OBJECTIVES)}, got {self.objective!r}")
        own = next((name for name, cls in OBJECTIVES.items() if cls is type(self)), self.objective)
        if self.objective != own:
            raise ValueError(f"{type(self).__name__} is the {own} objective, got objective={self.objective!r}")
        if self.branches < 1 or self.tree_anchors < 1 or self.rollout_rounds < 1:
            raise ValueError("branches, tree_anchors and rollout_rounds must be >= 1")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if self.ce_weight < 0:
            raise ValueError(f"ce_weight must be >= 0, got {self.ce_weight}")
        if not (0 < self.cod_ratio <= 1 and 0 < self.cod_floor <= 1 and 0 <= self.feature_dropout <= 1):
            raise ValueError("cod_ratio and cod_floor must be in (0, 1], feature_dropout in [0, 1]")
        if self.feature_scale <= 0:
            raise ValueError(f"feature_scale must be > 0, got {self.feature_scale}")
        kept = self.kept_layers
        if kept is not None and (not kept or min(kept) < 0 or self.objective != "pard"):
            raise ValueError(f"--kept_layers names the PARD drafter's layers to keep (--objective pard), got {kept}")
        if self.feature_layers is not None and (not self.feature_layers or not self.feature_injection):
            raise ValueError(
                "--feature_layers lists the layers --feature_injection reads; pass both (a non-empty list)"
            )

    def for_objective(self, objective: str | None = None) -> DistillationConfig:
        """These settings as the class of `objective` (default: this config's own). The one place where the
        objective's name becomes a class; the class, not the name, picks the trainer."""
        name = objective or self.objective
        cls = OBJECTIVES.get(name, DistillationConfig)  # an unknown name: refused by __post_init__
        if type(self) is cls:
            return self
        return cls(**{f.name: getattr(self, f.name) for f in fields(DistillationConfig)} | {"objective": name})


@dataclass
class DFlashConfig(DistillationConfig):
    """`--objective dflash`: teacher-forced DFlash cross-entropy on cached target text."""


@dataclass
class SpecOPDConfig(DistillationConfig):
    """`--objective specopd`: on-policy E2E-TV on proposal trees, one tree-masked target pass per sequence."""

    objective: str = field(default="specopd", metadata={"help": "specopd"})


@dataclass
class SequentialOPDConfig(DistillationConfig):
    """`--objective sequential_opd`: draft, verify, commit, supervise (one target pass per block)."""

    objective: str = field(default="sequential_opd", metadata={"help": "sequential_opd"})


@dataclass
class PardTrainingConfig(DistillationConfig):
    """`--objective pard`: a PARD drafter from `base_lm`, teacher-forced with conditional drop."""

    objective: str = field(default="pard", metadata={"help": "pard"})


OBJECTIVES: dict[str, type[DistillationConfig]] = {
    "dflash": DFlashConfig,
    "specopd": SpecOPDConfig,
    "sequential_opd": SequentialOPDConfig,
    "pard": PardTrainingConfig,
}


def argument_parser(config_class: type[DrafterTrainingConfig], description: str | None = None) -> HfArgumentParser:
    """The command line of `config_class`: HfArgumentParser (defaults shown, `description` kept as written), with
    each `--no_<name>` flag's own help text from the class's `negative_help` (HfArgumentParser repeats the positive
    flag's, which reads backwards)."""
    import argparse

    from transformers import HfArgumentParser

    class Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
        pass

    parser = HfArgumentParser(config_class, description=description, formatter_class=Formatter)
    for action in parser._actions:  # argparse keeps no public list of a parser's arguments
        negative = next((s[len("--no_") :] for s in action.option_strings if s.startswith("--no_")), None)
        if negative is not None:
            action.help = config_class.negative_help.get(negative, f"turn --{negative} off")
            action.default = argparse.SUPPRESS  # no "(default: False)": the positive flag's default is the one
    return parser


CorrectorTrainingConfig = DCOCOHeadTrainingConfig  # the names earlier releases used
MixtureTrainingConfig = DBLASTHeadTrainingConfig

__all__ = [
    "OBJECTIVES",
    "CorrectorTrainingConfig",
    "MixtureTrainingConfig",
    "DCOCOHeadTrainingConfig",
    "DFlashConfig",
    "DistillationConfig",
    "DrafterTrainingConfig",
    "DBLASTHeadTrainingConfig",
    "PardTrainingConfig",
    "SequentialOPDConfig",
    "SpecOPDConfig",
    "argument_parser",
]

"""Decode-time knobs of a drafter: chain or tree, how sampled drafts are made, prompt-lookup branches.

They live on the drafter (`drafter.decoding`, saved in its config as `decoding`), so users keep calling
`target.generate(..., assistant_model=drafter)` unchanged:

    drafter.decoding = DecodingSettings(tree_budget=24, prompt_lookup_tokens=8)
"""

from __future__ import annotations

import numbers
from dataclasses import asdict, dataclass, fields

_DRAFT_MODES = ("exact", "argmax")
_BUDGETS = ("fixed", "auto")
_WEIGHTS = ("auto", "as_loaded", "int8")
_CONTEXTS = ("copying", "none")
_STOP_ON = ("draft", "path", "kept")
_CHOICES = {
    "sampled_drafts": _DRAFT_MODES,
    "budget": _BUDGETS,
    "sampled_base_weights": _WEIGHTS,
    "sampled_choice_context": _CONTEXTS,
    "sampled_base_stop_on": _STOP_ON,
}
_MINIMUM = {  # integer fields: the smallest allowed value and what it means
    "tree_budget": (0, "0 = chain"),
    "tree_topk": (1, "candidates per position"),
    "sample_branches": (1, "1 = a chain"),
    "sampled_ar_drafts": (1, "1 = one parallel pass"),
    "sampled_base_drafts": (0, "0 = off"),
    "sampled_base_branches": (1, "1 = one chain"),
    "sampled_base_topk": (0, "0 = the whole processed row"),
    "greedy_base_drafts": (0, "0 = off"),
    "prompt_lookup_tokens": (0, "0 = off"),
    "prompt_lookup_ngram": (1, "longest suffix n-gram"),
}

# float fields in [0, 1)
_FRACTIONS = {
    "sampled_ar_stop": "0 = never stop early",
    "sampled_base_stop": "0 = never stop early",
    "greedy_base_stop": "0 = never stop early",
}


def _checked(name: str, value):
    """`value` for setting `name` (integers as plain int), or TypeError (wrong type) / ValueError (out of range,
    unknown name)."""
    known = [f.name for f in fields(DecodingSettings)]
    if name not in known:
        raise AttributeError(f"DecodingSettings has no setting {name!r}; known: {known}")
    if name in _MINIMUM:
        low, meaning = _MINIMUM[name]
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(
                f"DecodingSettings.{name} must be an int >= {low} ({meaning}), got {value!r} of type "
                f"{type(value).__name__}; e.g. DecodingSettings({name}={max(low, 8)})."
            )
        if value < low:
            raise ValueError(f"{name} must be >= {low} ({meaning}), got {value}")
        return int(value)  # numpy integers too: the settings are saved as JSON
    if name in _FRACTIONS:
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value < 1:
            raise ValueError(f"{name} must be a number in [0, 1) ({_FRACTIONS[name]}), got {value!r}")
        return float(value)
    if name in _CHOICES and (not isinstance(value, str) or value not in _CHOICES[name]):
        raise ValueError(f"{name} must be one of {_CHOICES[name]}, got {value!r}")
    return value


@dataclass
class DecodingSettings:
    """How a drafter proposes tokens inside `generate()`.

    Args:
        tree_budget: draft nodes verified per target forward. 0 = one chain of `block_size - 1` drafts; N > 0 =
            a greedy token tree of N nodes built best-first (DDTree) from the drafter's top-`tree_topk` per position.
        tree_topk: candidates per block position a greedy tree may branch into.
        sampled_drafts: with do_sample=True, "exact" samples drafts from the drafter's processed distribution q
            and verifies them with speculative sampling using that q; "argmax" drafts the argmax (q one-hot) and
            keeps target samples that match (transformers' stock loop).
        sample_branches: with "exact" sampling, i.i.d. draws from q per depth; the first continues the chain, the
            others are side leaves tried after it (multi-draft speculative sampling). 1 = a chain. On base-LM chains
            (`sampled_base_drafts`) every chain node gets `sample_branches - 1` such leaves: drawn from the q row
            its pass already scored, so they cost no drafter pass, only verified width (its chains themselves are
            `sampled_base_branches`). The shipped drafter sets 2 (docs/verification.md 1.4).
        sampled_ar_drafts: with "exact" sampling on a causal-LM drafter (PARD), the first N drafts are sampled one
            drafter pass each, every pass reading the drafts sampled before it, so a sampled block hangs together
            (q of draft d is the LM's conditional given drafts 1..d-1); the drafts after them come from the last
            pass's mask slots. N may exceed the block (`block_size - 1` drafts): the chain then runs past it, N
            drafts of their own passes and up to `block_size - 2` mask drafts after them (transformers' assistant
            drafts up to 20 tokens a step). 1 = one parallel pass (every slot blind to the draws before it). With budget
            "auto" it is the largest count, and each block's count in 1..N is chosen by what each realized
            (committed tokens per second, `models/pard/ar_choice.py`). Kinds that draft in one non-causal pass
            (the block drafter) and heads ignore it. Greedy decoding does not use it.
        sampled_ar_stop: with sampled_ar_drafts > 1, a dependent block ends after a draft that had probability below
            this under its q (the drafter doubts it, so the target likely rejects it): no further pass is paid for
            drafts after it. transformers' `assistant_confidence_threshold` (0.4) does the same for its assistant.
            0 = never end early.
        sampled_base_drafts: with "exact" sampling on a PARD drafter that holds its base LM (the causal LM it was
            adapted from, before its adapter: `PardDrafter.base_lm`), a dependent chain of up to N drafts sampled
            from the base LM's own conditionals, one pass each, ending after a draft of q below
            `sampled_base_stop` (transformers' assisted generation with the same model: 20 drafts, 0.4). Near T=1
            the base LM's q is closer to the target's than the adapter's, which was trained on the target's argmax
            (docs/verification.md 1.4). With budget "fixed" every sampled block is such a chain; with "auto" each
            is such a chain, verified whole, or a plain step where chains do not pay, chosen per block by their
            realized rates (`models/pard/ar_choice.py`; the adapter drafts of `sampled_ar_drafts` are then not
            tried). 0 = off.
        sampled_base_stop: the threshold that ends a base-LM chain (see `sampled_base_drafts`); 0 = never.
        sampled_base_stop_on: what the threshold is compared with: "draft", the q of the last draft (transformers'
            rule); "path", the product of the q of every draft on the chain so far, an estimate of the chance the
            target keeps them all, so a chain of confident drafts still ends once the next one would rarely be
            reached; "kept", the product of each draft's chance of being kept as drafts of its q realized on this
            drafter's verified chains (`models/pard/kept_by_q.py`): near T=1 the target keeps low-q drafts far more
            often than their q, but on a 2-core CPU the longer chains measured slower at T=1 (paired time 1.106;
            docs/verification.md 1.4). Its memory learns only from blocks of one chain without leaves
            (`sample_branches=1`, `sampled_base_branches=1`): with a leaf, a step's accepted count no longer says
            which of the chain's drafts were kept, so with the shipped `sample_branches=2` it keeps its starting
            chances.
        sampled_base_branches: base-LM chains drawn i.i.d. per block, merged where they agree (a trie verified in one
            target pass, multi-draft speculative sampling over whole branches): each node's children are the
            distinct draws of the chains through it, each carrying q without its earlier siblings, and a node is
            drafted on only if its own q reached `sampled_base_stop` (`models/pard/base_chain.py`). 1 = one chain.
        sampled_base_topk: a base-LM chain draws from q over the K most likely tokens of its row, the call's
            truncating warpers (top-k, top-p, min-p, ...) applied to those K: a full-vocabulary sort per draft
            (about 18 ms on a 2-core CPU) becomes a top-K. q is still what the draft was drawn from, so the output is
            unchanged; only acceptance can move. 0 = the whole processed row.
        sampled_base_weights: "int8" runs base-LM chains through weight-only int8 copies of its linear layers and
            head rows where torch has the kernel (the CPU; elsewhere as loaded): a one-token pass reads half the
            bytes. "as_loaded" keeps the base LM's own dtype. "auto" times one-token and 32-token passes both ways
            once, on the first chain, and runs int8 the passes up to the width where it stops being faster
            (`PardDrafter.base_int8_widest`, `base_weights_seconds`): how much int8 saves differs between CPUs, and
            its kernels are made for one-token rows (on a 2-core AMD EPYC with avx512_bf16, one token 45 ms against
            74 ms for the 0.5B, 32 tokens 213 ms against 128 ms, so the prompt runs as loaded).
        sampled_choice_context: with budget "auto", what the per-block choice of sampled PARD blocks (a base-LM
            chain or, without one, 1..`sampled_ar_drafts` adapter drafts; or a plain step) keeps apart: "copying"
            judges blocks of a row that is copying a span (its previous step accepted a prompt-lookup node, where the
            lookup branch alone may commit as much as a drafted block) by their own rates, apart from the others;
            "none" judges all blocks together. Measured at T=0.7 on four task families, "copying" was slower (paired
            time 1.159, +-2 SE 0.976-1.375; docs/verification.md 1.4): each memory pays its own tries of every
            choice.
        greedy_base_drafts: with greedy decoding on a PARD drafter that holds its base LM (see
            `sampled_base_drafts`), a block may instead be the base LM's argmax chain of up to N drafts, one pass
            each, ending after the draft at which the product of the chain's q falls below `greedy_base_stop`: the
            drafts depend on each other, where the adapter's parallel slots are blind to the drafts before them. With
            budget "fixed" every greedy block is such a chain; with "auto" each block is such a chain, verified
            whole, or the adapter's tree (cut by the budget), chosen per block by their realized rates
            (`models/pard/ar_choice.py`), and the budget keeps deciding plain steps. On a 2-core CPU it was faster
            on GSM8K and slower on HumanEval and creative text (docs/pard.md 5.7), so the shipped drafter leaves it
            off. 0 = off.
        greedy_base_stop: the path-q threshold that ends a greedy base-LM chain (see `greedy_base_drafts`); 0 = never.
        prompt_lookup_tokens: length of an extra branch copied from the prompt or output after the longest
            matching suffix n-gram (prompt lookup decoding); 0 = off.
        prompt_lookup_ngram: longest suffix n-gram looked up.
        budget: "fixed" verifies the sizes above every step; "auto" treats them (and the block) as the largest
            allowed and picks, per step, the subtree that maximises committed tokens per second on this machine,
            from a measured step-cost curve and the drafter's acceptance so far (plain one-token steps when no
            draft pays). Output is the same either way.
    """

    tree_budget: int = 0
    tree_topk: int = 4
    sampled_drafts: str = "exact"
    sample_branches: int = 1
    sampled_ar_drafts: int = 3
    sampled_ar_stop: float = 0.0
    sampled_base_drafts: int = 0
    sampled_base_stop: float = 0.4
    sampled_base_stop_on: str = "draft"
    sampled_base_branches: int = 1
    sampled_base_topk: int = 0
    sampled_base_weights: str = "auto"
    sampled_choice_context: str = "none"
    greedy_base_drafts: int = 0
    greedy_base_stop: float = 0.5
    prompt_lookup_tokens: int = 0
    prompt_lookup_ngram: int = 3
    budget: str = "auto"

    def __setattr__(self, name: str, value) -> None:
        # every assignment is checked, at construction and later (`settings.tree_budget = 8`), so a wrong type
        # fails here with its name, not as a TypeError deep inside generate()
        super().__setattr__(name, _checked(name, value))

    @classmethod
    def from_dict(cls, values: dict | None) -> DecodingSettings:
        if values is not None and not isinstance(values, dict):
            raise TypeError(
                f"decoding settings must be a dict of DecodingSettings fields, got {type(values).__name__}: {values!r}"
            )
        values = dict(values or {})
        unknown = set(values) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown decoding settings {sorted(unknown)}; known: {[f.name for f in fields(cls)]}")
        return cls(**values)

    def to_dict(self) -> dict:
        return asdict(self)

    def needs_own_loop(self, do_sample: bool) -> bool:
        """Trees, lookup branches, exact-q sampling and the adaptive budget run in hf_specdec's loop; fixed argmax
        chains in transformers'."""
        if self.budget == "auto":
            return True
        if not do_sample and self.greedy_base_drafts > 0:
            return True
        return self.tree_budget > 0 or self.prompt_lookup_tokens > 0 or (do_sample and self.sampled_drafts == "exact")


def check_saved_settings(values: object) -> None:
    """Refuse a config's saved `decoding` that `DecodingSettings` does not take (a wrong type, an out-of-range value,
    an unknown name): a drafter config calls it when built, so a bad one fails at load, not at the first generate.
    Raises the TypeError or ValueError `DecodingSettings` raises, prefixed with what it is."""
    try:
        DecodingSettings.from_dict(values)
    except (TypeError, ValueError) as err:
        raise type(err)(
            f"the drafter's saved decoding settings are invalid: {err} Fix or remove `decoding` in its config.json."
        ) from err


class SavedDecoding:
    """Mixin for drafter models: `decoding` is read from and written to `config.decoding`, so it is saved with the
    drafter. Assign a whole `DecodingSettings` (or dict): the property returns a copy."""

    @property
    def decoding(self) -> DecodingSettings:
        """Decode-time settings (chain or tree, sampled drafts, prompt lookup, budget); saved in the config."""
        return DecodingSettings.from_dict(self.config.decoding)

    @decoding.setter
    def decoding(self, settings: DecodingSettings | dict) -> None:
        if not isinstance(settings, DecodingSettings):
            settings = DecodingSettings.from_dict(settings)
        self.config.decoding = settings.to_dict()


__all__ = ["DecodingSettings", "SavedDecoding", "check_saved_settings"]

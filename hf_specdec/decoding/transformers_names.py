"""transformers' assisted-generation settings, read for an hf_specdec drafter.

transformers' `GenerationConfig` has settings for its own drafting methods (an assistant LM, prompt lookup, early
exit, MTP). Passed to `generate(assistant_model=drafter, ...)`, each one either sets its hf_specdec equivalent, a
`DecodingSettings` field, for that call only (`settings_for_call`; the drafter's saved settings are not changed),
or is refused with an error that names what to set instead (`check_transformers_names`):

- mapped, for the call: `prompt_lookup_num_tokens` -> `prompt_lookup_tokens`, `max_matching_ngram_size` ->
  `prompt_lookup_ngram` (prompt lookup must be on), `num_assistant_tokens_schedule` -> `budget` ("constant" ->
  "fixed", "heuristic" and "heuristic_transient" -> "auto");
- refused, naming the equivalent: `num_assistant_tokens` (drafts per step are the drafter's `block_size - 1`; its
  `budget` and `tree_budget` choose how many are verified), `assistant_confidence_threshold` (`budget="auto"`),
  `assistant_lookbehind` and `target_lookbehind` (for an assistant with another tokenizer: none needed),
  `assistant_ensemble_weight` (lossy; hf_specdec verifies losslessly), and the names that select another drafting
  method: `assistant_early_exit`, `use_mtp`, `speculation_type` (but `speculation_type="dflash"` with a block
  drafter, the DFlash-style kind, is accepted: it names what the drafter is, and hf_specdec's generator runs it).

The same, as a table for users: docs/usage.md, "transformers' assisted-generation settings".

Settings that transformers fills with a default when unset (`num_assistant_tokens=20`, the schedule "constant", ...)
count only when the call passes them (`generate(...)` keyword arguments or its `generation_config`): `explicit`
is the set of such names the call passed (`transformers_seam` records it). With `explicit=None` (a caller that
cannot map per call, the server) every setting that is not None counts, and the mapped ones are refused too,
naming the `DecodingSettings` field to set on the drafter.
"""

from __future__ import annotations

from collections.abc import Iterable

from transformers import GenerationConfig, PreTrainedModel

from ..models.block_drafter.modeling_block_drafter import BlockDrafter
from ..models.settings import DecodingSettings

# transformers' name -> the DecodingSettings field it sets for one call
MAPPED = {
    "prompt_lookup_num_tokens": "prompt_lookup_tokens",
    "max_matching_ngram_size": "prompt_lookup_ngram",
    "num_assistant_tokens_schedule": "budget",
}
SCHEDULES = {"constant": "fixed", "heuristic": "auto", "heuristic_transient": "auto"}
_OTHER_METHOD = "selects another drafting method than {name}'s; unset it when passing {name}."
# transformers' name -> why it is refused and what to set instead ({name}: the drafter's class, {drafts}: its
# drafts per step); the message starts with `name=value`
REFUSED = {
    "num_assistant_tokens": "(drafts per step) has no per-call equivalent for {name}: it drafts up to "
    "{drafts} tokens per step, fixed when it was built and trained (drafter.config.block_size), and "
    "its DecodingSettings decide how many of them a step verifies (budget='auto', the default, picks per step; "
    "budget='fixed' verifies the whole block, or tree_budget nodes of a tree). Unset num_assistant_tokens, or set "
    "drafter.decoding = DecodingSettings(budget=..., tree_budget=...).",
    "assistant_confidence_threshold": "(stop drafting where the assistant's confidence drops) has no equivalent for "
    "{name}: its DecodingSettings(budget='auto'), the default, sizes each step's draft from the drafter's own "
    "probabilities and measured acceptance and cost. Unset assistant_confidence_threshold "
    "(num_assistant_tokens_schedule='heuristic' selects budget='auto' for one call).",
    "assistant_lookbehind": "aligns an assistant that uses another tokenizer (universal assisted decoding); {name} "
    "drafts the target's own tokens, so it has no equivalent. Unset assistant_lookbehind.",
    "target_lookbehind": "aligns an assistant that uses another tokenizer (universal assisted decoding); {name} "
    "drafts the target's own tokens, so it has no equivalent. Unset target_lookbehind.",
    "assistant_ensemble_weight": "(verification against a target/assistant mixture, not lossless) has no "
    "equivalent for {name}: hf_specdec verifies against the target alone, so output is exactly the target's. Unset "
    "assistant_ensemble_weight, or drop assistant_model to use transformers' assisted generation with it.",
    "assistant_early_exit": _OTHER_METHOD,
    "use_mtp": _OTHER_METHOD,
    "speculation_type": "selects transformers' own drafting code for its own assistant classes; {name} is not a "
    "DFlash-style drafter (only a BlockDrafter runs with speculation_type='dflash', which it then ignores). Unset "
    "speculation_type: hf_specdec drafts with {name} through its own generator.",
}
NAMES = (*MAPPED, *REFUSED)
_DEFAULTED = frozenset(GenerationConfig._get_default_generation_params())  # filled in by transformers when unset


def explicit_names(generation_config: GenerationConfig | None, kwargs: Iterable[str]) -> frozenset[str]:
    """The names of `NAMES` a `generate()` call passed: as keyword arguments or set in its `generation_config`."""
    passed = {name for name in kwargs if name in NAMES}
    if generation_config is not None:
        passed |= {name for name in NAMES if getattr(generation_config, name, None) is not None}
    return frozenset(passed)


def _set_names(generation_config: GenerationConfig, explicit: frozenset[str] | None) -> list[str]:
    """`NAMES` this call sets, in table order."""
    found = []
    for knob in NAMES:
        value = getattr(generation_config, knob, None)
        if value is None or value is False:  # use_mtp=False is off
            continue
        if explicit is not None and knob in _DEFAULTED and knob not in explicit:
            continue  # transformers' default, not the caller's
        found.append(knob)
    return found


def _mapped_value(knob: str, value, drafter_name: str):
    """The DecodingSettings value `knob=value` stands for (ValueError for a value transformers does not take)."""
    if knob == "num_assistant_tokens_schedule":
        if value not in SCHEDULES:
            raise ValueError(
                f"transformers' schedules are {sorted(SCHEDULES)}; with {drafter_name} they select DecodingSettings."
                f"budget: {SCHEDULES}."
            )
        return SCHEDULES[value]
    return value


def settings_for_call(
    drafter: PreTrainedModel, generation_config: GenerationConfig, explicit: frozenset[str]
) -> DecodingSettings | None:
    """The drafter's `DecodingSettings` with the mapped names this call sets, or None when it sets none.

    A value `DecodingSettings` does not take raises its TypeError or ValueError, prefixed with the transformers
    name it came from."""
    name = type(drafter).__name__
    found = [knob for knob in _set_names(generation_config, explicit) if knob in MAPPED]
    if not found:
        return None
    if not hasattr(drafter, "decoding"):
        raise ValueError(
            f"{found[0]} sets DecodingSettings.{MAPPED[found[0]]} for one call, but {name} has no DecodingSettings; "
            f"unset {found[0]}."
        )
    settings = drafter.decoding  # a copy: the drafter's own are not changed here
    for knob in found:
        value = getattr(generation_config, knob)
        try:
            setattr(settings, MAPPED[knob], _mapped_value(knob, value, name))
        except (TypeError, ValueError) as err:
            raise type(err)(
                f"{knob}={value!r} sets {name}'s DecodingSettings.{MAPPED[knob]} for this call: {err}"
            ) from err
    if "max_matching_ngram_size" in found and settings.prompt_lookup_tokens == 0:
        raise ValueError(
            f"max_matching_ngram_size={generation_config.max_matching_ngram_size} sets DecodingSettings."
            f"prompt_lookup_ngram, but prompt lookup is off for {name} (prompt_lookup_tokens=0): pass "
            "prompt_lookup_num_tokens=N too, or set drafter.decoding = DecodingSettings(prompt_lookup_tokens=N)."
        )
    return settings


def check_transformers_names(
    drafter: PreTrainedModel, generation_config: GenerationConfig, explicit: frozenset[str] | None
) -> None:
    """Raise ValueError (or the TypeError of a bad mapped value) for a transformers drafting setting the call cannot
    honour with `drafter`; see the module docstring. `explicit=None`: no per-call mapping, mapped names refused."""
    name = type(drafter).__name__
    block = getattr(drafter.config, "block_size", None)
    drafts = "block_size - 1" if block is None else f"block_size - 1 = {block - 1}"
    for knob in _set_names(generation_config, explicit):
        value = getattr(generation_config, knob)
        if knob == "speculation_type" and value == "dflash" and isinstance(drafter, BlockDrafter):
            continue  # it names the method a block drafter is: hf_specdec's generator runs it
        if knob in REFUSED:
            raise ValueError(f"{knob}={value!r} " + REFUSED[knob].format(name=name, drafts=drafts))
        if explicit is None:
            field = MAPPED[knob]
            mapped = _mapped_value(knob, value, name)
            raise ValueError(
                f"{knob}={value!r} stands for DecodingSettings.{field}, which only generate() sets for one call; "
                f"here set it on the drafter: drafter.decoding = DecodingSettings({field}={mapped!r}, ...)."
            )
    if explicit is not None:
        settings_for_call(drafter, generation_config, explicit)  # its values are checked before any work


__all__ = ["MAPPED", "NAMES", "REFUSED", "check_transformers_names", "explicit_names", "settings_for_call"]

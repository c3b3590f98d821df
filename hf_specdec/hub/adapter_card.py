"""The README.md of a LoRA adapter folder saved by hf_specdec's training: what it is, its base, how to load it.

It replaces peft's empty template: a reader of output_dir/adapter (or of a repo it was copied to) learns which
drafter the adapter goes on and that `hf_specdec.load_drafter` loads the two merged, from any working directory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

ADAPTER_README = "README.md"


def adapter_card_text(folder: str | os.PathLike) -> str:
    """The card of the adapter saved in `folder` (adapter_config.json, and a drafter config.json for a PARD one)."""
    folder = Path(folder)
    adapter = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))
    drafter_config = folder / "config.json"
    if drafter_config.is_file():  # an adapter-format drafter (PARD): its config names the base LM
        config = json.loads(drafter_config.read_text(encoding="utf-8"))
        base = config.get("base_model")
        what = f"a `{config.get('model_type')}` drafter saved as its config and a LoRA adapter over the LM `{base}`"
        where = "`base_model` in config.json: a folder, an offline model name (`scripts/offline_models.py`) or a Hub id"
    else:
        base = adapter.get("base_model_name_or_path")
        what = f"a LoRA adapter (rank {adapter.get('r')}) over the hf_specdec drafter `{base}`"
        where = "`base_model_name_or_path` in adapter_config.json: relative to this folder, or a Hub id"
    return (
        "---\nlibrary_name: hf_specdec\ntags:\n- hf_specdec\n- speculative-decoding\n- lora\n---\n\n"
        f"# LoRA adapter for an hf_specdec drafter\n\nThis folder holds {what}. The base is recorded as {where}; "
        "it is found from any working directory.\n\n"
        "```python\n"
        "import hf_specdec  # registers the drafter kinds; without it transformers does not know them\n\n"
        'drafter = hf_specdec.load_drafter("path/to/this/folder", dtype=target.dtype)  # base + adapter, merged\n'
        "out = target.generate(**inputs, assistant_model=drafter, max_new_tokens=256)\n"
        "```\n\n"
        "`transformers.AutoModel.from_pretrained` does not merge adapters: use `hf_specdec.load_drafter`. Without "
        "`import hf_specdec` transformers suggests upgrading itself; importing hf_specdec is the fix.\n"
    )


def write_adapter_card(folder: str | os.PathLike) -> Path:
    """Write `adapter_card_text` to `folder`/README.md (replacing peft's template) and return its path."""
    path = Path(folder) / ADAPTER_README
    path.write_text(adapter_card_text(folder), encoding="utf-8")
    return path


__all__ = ["adapter_card_text", "write_adapter_card"]

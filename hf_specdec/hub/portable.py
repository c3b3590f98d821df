"""Published files name no local path: absolute paths become what they stand for, or a relative path.

A run records paths as it saw them: the target's folder, the base LM under `~/.cache/hf_specdec/models`, the data
file, the output folder. On the Hub they say nothing to a reader and leak the publisher's home directory, so
`Portable.text` / `Portable.json` rewrite every absolute (or `~/`) path:

1. a path named in `known` (the target's local folder) becomes its Hub id;
2. a path under the offline models folder becomes the offline model name (`qwen2.5-coder-0.5b`), which
   `scripts/offline_models.py NAME` builds on any machine;
3. a path under the working directory becomes relative to it (as typed from the repository's root);
4. any other becomes `path/to/<its last part>`, a placeholder that reads as one.

`leaks` is the last check before anything is sent: the publisher's home directory or an absolute path left in text.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..models.base_models import offline_models_dir

# An absolute POSIX path of two parts or more (`/a/b`), or a `~/` path, not inside a URL or a relative path.
ABSOLUTE = re.compile(r"(?<![\w.:/~-])(?:~|/[\w.+@-]+)(?:/[\w.+@-]+)+/?")


@dataclass
class Portable:
    """Rewrites local paths for publishing. `known`: local path -> what it stands for (a Hub id)."""

    known: dict[str, str] = field(default_factory=dict)
    cwd: Path = field(default_factory=Path.cwd)
    home: Path = field(default_factory=Path.home)

    def path(self, raw: str) -> str:
        """The portable form of one absolute or `~/` path (rules 1-4 of the module docstring)."""
        local = Path(os.path.expanduser(raw)).resolve(strict=False)
        for name, hub_id in self.known.items():
            if name and local == Path(os.path.expanduser(name)).resolve(strict=False):
                return hub_id
        for root in (offline_models_dir().resolve(strict=False), self.cwd.resolve(strict=False)):
            if local.is_relative_to(root) and local != root:
                return local.relative_to(root).as_posix()
        return f"path/to/{local.name}"

    def text(self, text: str) -> str:
        """`text` with every absolute or `~/` path rewritten."""
        return ABSOLUTE.sub(lambda m: self.path(m.group(0)), text)

    def json(self, value):
        """A JSON value with every string that is an absolute or `~/` path (or holds one) rewritten."""
        if isinstance(value, dict):
            return {k: self.json(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.json(v) for v in value]
        return self.text(value) if isinstance(value, str) else value

    def leaks(self, text: str) -> list[str]:
        """The local paths still in `text`: the home directory, and absolute paths."""
        found = [m.group(0) for m in ABSOLUTE.finditer(text)]
        home = str(self.home)
        if home not in ("", "/") and home + "/" in text and not any(home in f for f in found):
            found.append(home)
        return found


__all__ = ["ABSOLUTE", "Portable"]

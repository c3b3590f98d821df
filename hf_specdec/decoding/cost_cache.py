"""The cache files under `$HF_SPECDEC_CACHE`, read and written so that they can never fail a call.

`step_costs.json` maps a model key (`step_cost.model_key`) to that target's points, `{rows: {fed tokens: [seconds,
...]}}` with string keys; `budget_memory.json` maps a model and drafter key to the budget's verdict on that drafter
(`budget_memory.py`). Anything in a file that does not parse, is of a foreign shape, out of range or not finite is
left out (that part is measured afresh), and a location that cannot be read or written keeps it in the process;
either way the process is told once per file (a `logging` warning), and no call raises because of it.

Writers never tear the file: each writes a temporary file of its own in the same folder and moves it into place with
`os.replace`. They merge under a lock file beside it (`step_costs.json.lock`), so threads and processes saving curves
of different targets at once keep each other's entries.
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from filelock import FileLock

logger = logging.getLogger(__name__)

MAX_SECONDS = 3600.0  # one target forward longer than this is not a timing (and sums of such would overflow)
MAX_SIZE = 1 << 20  # rows or fed tokens beyond this are not a forward this library ran
LOCK_SECONDS = 30.0  # how long a save waits for another writer before giving up (with the one warning)
SHOWN = 3  # problems named in the warning
COSTS_FILE, BUDGET_FILE = "step_costs.json", "budget_memory.json"

Points = dict[int, dict[int, list[float]]]

_WARNED: set[str] = set()  # files this process has warned about (once each)
_WARNED_LOCK = threading.Lock()


def load(path: Path, key: str, clean_entry: Callable[[object], tuple[Any, list[str]]] | None = None) -> Any:
    """The entry saved under `key` in `path`, as `clean_entry` (default `clean`: step-cost points) makes it usable:
    {} when the file or the key is missing; whatever cannot be used is left out, with one warning per process for
    this file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:  # a folder in its place, no permission, not UTF-8
        warn_once(path, f"could not be read ({_reason(error)}); its entries are ignored and measured afresh")
        return {}
    try:
        saved = json.loads(text)
    except (ValueError, RecursionError) as error:
        warn_once(path, f"is not JSON ({_reason(error)}); its entries are ignored and measured afresh")
        return {}
    if not isinstance(saved, dict):
        what = type(saved).__name__
        warn_once(path, f"holds a JSON {what}, not a mapping of entries; it is ignored and they are measured afresh")
        return {}
    if key not in saved:
        return {}
    entry, problems = (clean_entry or clean)(saved[key])
    if problems:
        listed = "; ".join(problems[:SHOWN]) + (f"; and {len(problems) - SHOWN} more" if len(problems) > SHOWN else "")
        warn_once(path, f"has entries for {key} that are not usable ({listed}); they are ignored and measured afresh")
    return entry


def save(path: Path, key: str, entry: dict) -> str | None:
    """Write `entry` (JSON-ready) under `key` into `path`, keeping the other entries; None when written, else why not
    (warned once per process for this file, never raised)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(f"{path}.lock", timeout=LOCK_SECONDS):
            saved = _mapping(path)
            saved[key] = entry
            _replace(path, json.dumps(saved, indent=1))
    except (OSError, ValueError, NotImplementedError) as error:  # unwritable; a lock the filesystem does not support
        reason = _reason(error)
        warn_once(
            path,
            f"cannot be written ({reason}): what it would hold was not saved and is kept in this process only; point "
            "HF_SPECDEC_CACHE at a writable folder (or set it to '' to keep it in memory without this warning)",
        )
        return reason
    return None


def points_entry(points: Points) -> dict:
    """Step-cost points as the file keeps them (string keys)."""
    return {str(r): {str(n): list(v) for n, v in fed.items()} for r, fed in points.items()}


def clean(raw: object) -> tuple[Points, list[str]]:
    """The usable points of one saved entry, and what was left out of it: rows and fed tokens are whole numbers from
    1 to `MAX_SIZE`, timings finite seconds above 0 and at most `MAX_SECONDS`; an empty list of timings is no point."""
    if not isinstance(raw, dict):
        return {}, [f"the entry is a JSON {type(raw).__name__}, not a mapping"]
    points: Points = {}
    problems: list[str] = []
    for r, fed in raw.items():
        rows = whole_number(r)
        if rows is None or not isinstance(fed, dict):
            problems.append(f"rows {r!r}: {_short(fed)}" if rows is not None else f"rows key {r!r}")
            continue
        for n, samples in fed.items():
            size = whole_number(n)
            if size is None:
                problems.append(f"rows {rows}: fed key {n!r}")
            elif not isinstance(samples, list) or not all(map(valid_timing, samples)):
                problems.append(f"rows {rows}, fed {size}: {_short(samples)}")
            elif samples:
                points.setdefault(rows, {})[size] = [float(s) for s in samples]
    return points, problems


def warn_once(path: Path, message: str) -> None:
    """Log `hf_specdec: the step-cost cache <path> <message>` (the budget-memory cache for that file) the first time
    this process says anything about it."""
    name = os.path.abspath(path)
    with _WARNED_LOCK:
        if name in _WARNED:
            return
        _WARNED.add(name)
    what = "budget-memory cache" if Path(name).name == BUDGET_FILE else "step-cost cache"
    logger.warning("hf_specdec: the %s %s %s", what, name, message)


def _mapping(path: Path) -> dict:
    """The file's top-level mapping to merge into: {} when it is missing or not a usable mapping (already warned
    about when it was loaded, if it was)."""
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError, RecursionError):
        return {}
    return saved if isinstance(saved, dict) else {}


def _replace(path: Path, text: str) -> None:
    """Put `text` at `path` whole: a temporary file of this writer's own in the same folder, moved into place."""
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def whole_number(key: object, least: int = 1) -> int | None:
    """A rows or fed-tokens key (a whole number from `least` to `MAX_SIZE`, or its string as JSON keeps it), else
    None."""
    if isinstance(key, bool) or not isinstance(key, (str, int)):
        return None
    try:
        value = int(key)
    except ValueError:
        return None
    return value if least <= value <= MAX_SIZE else None


def valid_timing(seconds: object) -> bool:
    """Whether `seconds` is a usable timing of one forward (a finite number above 0, at most `MAX_SECONDS`)."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        return False
    return math.isfinite(seconds) and 0 < seconds <= MAX_SECONDS


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _reason(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


__all__ = [
    "BUDGET_FILE",
    "COSTS_FILE",
    "MAX_SECONDS",
    "MAX_SIZE",
    "clean",
    "load",
    "points_entry",
    "save",
    "valid_timing",
    "warn_once",
    "whole_number",
]

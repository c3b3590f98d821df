"""The repository speaks of the product: no tracked text file names a machine's own paths (a home directory, a
checkout's location, a temporary folder, a virtualenv's interpreter) or numbers the runs that made it.

Tracked files are those `git ls-files` lists; binaries (a NUL byte, or not UTF-8) are skipped. A failure names
file:line and the text found. Exceptions are listed below, each with its reason.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# An absolute path into a home directory, a checkout or a temporary folder, on Linux, macOS or Windows. The folder
# names are joined here, not written out, so this file holds none of the paths it looks for.
ROOTS = ("home", "root", "work", "tmp", "Users", "private/var", "var/folders")
MACHINE_PATH = re.compile(
    r"(?<![\w.~$-])(?:" + "|".join(f"/{name}/" for name in ROOTS) + r")|\b[A-Za-z]:\\\\?(?:Users|Windows|tmp)"
)
# Words that number or recall how the work was organised, not what the product does.
PROCESS_WORDS = re.compile(
    r"\bsession[\s_-]*\d+|\b(?:this|that|previous|next|last|an earlier|a later) session\b|\brun \d+ of\b"
    r"|\b(?:issue|ticket)s? #?\d+",
    re.I,
)

# file -> reason it may hold what the scans look for
ALLOWED = {
    "tests/test_repository_hygiene.py": "this test: it spells the process words it looks for",
    "tests/test_adapter_portability.py": "a config saved on another machine (a home folder) is the input the test "
    "checks is resolved here",
}


def tracked_texts() -> list[tuple[str, str]]:
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    out = []
    for name in filter(None, names.decode().split("\0")):
        path = ROOT / name
        if name in ALLOWED or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue
        try:
            out.append((name, data.decode("utf-8")))
        except UnicodeDecodeError:
            continue
    return out


def hits(pattern: re.Pattern) -> list[str]:
    found = []
    for name, text in tracked_texts():
        for number, line in enumerate(text.splitlines(), 1):
            match = pattern.search(line)
            if match:
                found.append(f"{name}:{number}: {match.group(0)!r} in {line.strip()[:160]!r}")
    return found


def test_allowed_files_exist():
    missing = [name for name in ALLOWED if not (ROOT / name).is_file()]
    assert not missing, f"exceptions listed for files that are gone (remove them from ALLOWED): {missing}"


@pytest.mark.parametrize("what, pattern", [("machine paths", MACHINE_PATH), ("process words", PROCESS_WORDS)])
def test_no_tracked_text_file_holds(what, pattern):
    found = hits(pattern)
    assert not found, f"{len(found)} {what} in tracked files:\n" + "\n".join(found[:50])


def test_the_scans_catch_what_they_look_for():
    for name in ROOTS:
        assert MACHINE_PATH.search(f"`/{name}/main/.venv/bin/python scripts/x.py`"), name
    assert MACHINE_PATH.search("C:\\Users\\me\\drafter") and MACHINE_PATH.search("/Users/me/x")
    assert not MACHINE_PATH.search("~/.cache/hf_specdec/models and runs/" + "tmp/x and $HOME/x")  # relative: fine
    numbered = "session" + "18"
    assert PROCESS_WORDS.search(f"results/{numbered}-single") and PROCESS_WORDS.search("in an earlier session")
    assert PROCESS_WORDS.search("Issue 15's criterion") and PROCESS_WORDS.search("run 3 of 5")
    assert not PROCESS_WORDS.search('@pytest.fixture(scope="session")')


# `sha:results/...` (git show) names a path of an earlier commit, not one of this tree
CITED_RESULT = re.compile(r"(?<![\w.~/:-])results/[\w.@/-]*")


def test_every_cited_results_path_exists():
    """Every `results/...` path that README.md, docs/, results/README.md and the shipped drafters' records cite is in
    the repository (a figure is only as good as the run it points to)."""
    pages = [ROOT / "README.md", ROOT / "results" / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("drafters/*/*.md")]
    missing = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        text = re.sub(r"<!-- results:start -->.*?<!-- results:end -->", "", text, flags=re.S)  # a copied report
        for cited in CITED_RESULT.findall(text):
            path = cited.rstrip(".,;:")
            if not (ROOT / path).exists():
                missing.append(f"{page.relative_to(ROOT)}: {path}")
    assert not missing, "cited results that are not in the repository:\n" + "\n".join(missing)

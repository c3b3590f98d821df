"""Every command README.md, docs/*.md and the scripts' --help show runs as written: the scripts and files exist,
their parsers accept the arguments, shell scripts parse, Python snippets compile, and every script's --help starts
without torch.

A command is checked without running its work: `python scripts/X.py ARGS` (also under `accelerate launch`) is
parsed by the script's own parser, caught in `main()` at its `parse_known_args` call, so nothing loads. A bare
`...` marks an abbreviated command; the README has none, a --help example may, and then only the flags it names
are checked. Paths the README names under scripts/, drafters/, results/ and examples/ exist, except the ones it
says are restored from git history. The results section between the markers is a copied report and not checked.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
# the README and every docs page: their commands, snippets and paths are checked alike
PAGES = {p.relative_to(ROOT).as_posix(): p.read_text() for p in [ROOT / "README.md", *sorted(ROOT.glob("docs/*.md"))]}
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
RESULTS = re.compile(r"<!-- results:start -->.*?<!-- results:end -->", re.S)
PATH = re.compile(r"(?<![\w.~/:-])(?:scripts|drafters|results|examples)/[\w.@*/-]*")
RESTORED = re.compile(r"git checkout \w+ -- ([\w./-]+)")  # a path the README says comes back from git history
# commands of other tools the README shows; they are not run, the paths they name are checked like any other
OTHER_TOOLS = ("vllm serve", "python -m sglang.launch_server", "export ", "git checkout ", ". .venv/bin/activate")
SCRIPTS = sorted(p for p in (ROOT / "scripts").glob("*.py") if "__main__" in p.read_text())


class Parsed(Exception):
    """Raised in place of parsing: carries the parser a script's main() built."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser


def shell_commands(text: str, starting: str = "") -> list[str]:
    """The commands of a shell snippet (those of its lines that match `starting`, for a help text): continuation
    lines joined, comments and blank lines dropped."""
    lines = [x.strip() for x in re.sub(r"\\\n", " ", text).splitlines() if re.match(starting, x.strip())]
    return [command for command in (shlex.join(shlex.split(x, comments=True)) for x in lines) if command]


def readme_blocks(language: tuple[str, ...], text: str | None = None) -> list[str]:
    """Fenced blocks of `language` in `text` (default: the README and every docs page), copied reports left out."""
    texts = [text] if text is not None else list(PAGES.values())
    return [body for t in texts for lang, body in FENCE.findall(RESULTS.sub("", t)) if lang in language]


README_COMMANDS = [c for block in readme_blocks(("bash", "sh")) for c in shell_commands(block)]


def script_parser(script: Path, monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    """The parser `script`'s main() builds, caught when main() starts parsing (nothing after that runs)."""

    def caught(parser, *args, **kwargs):
        raise Parsed(parser)

    with monkeypatch.context() as patch:
        patch.syspath_prepend(str(script.parent))  # what `python scripts/X.py` puts first on sys.path
        spec = importlib.util.spec_from_file_location(f"script_{script.stem}", script)
        module = importlib.util.module_from_spec(spec)
        patch.setitem(sys.modules, spec.name, module)  # as for a script run: its dataclasses look their module up
        spec.loader.exec_module(module)
        patch.setattr(argparse.ArgumentParser, "parse_known_args", caught)
        patch.setattr(sys, "argv", [str(script)])
        try:
            module.main()
        except Parsed as parsed:
            return parsed.parser
    raise AssertionError(f"{script.name}: main() returned without parsing its arguments")


def check_command(command: str, monkeypatch: pytest.MonkeyPatch, abbreviations: bool = False) -> None:
    """Assert that `command` would start as written (see the module docstring)."""
    words = shlex.split(command)
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # VAR=value before the command
        words = words[1:]
    if command.startswith(OTHER_TOOLS):
        return
    if words[:2] == ["bash", words[1]] and words[1].endswith(".sh"):
        assert (ROOT / words[1]).is_file(), f"{command}: no {words[1]}"
        subprocess.run(["bash", "-n", str(ROOT / words[1])], check=True)
        return
    if words[:2] == ["pip", "install"]:
        section = (ROOT / "pyproject.toml").read_text().split("[project.optional-dependencies]")[1].split("\n[")[0]
        extras = re.findall(r"^([\w-]+)\s*=", section, re.M)
        for name in re.findall(r"\.\[([\w,-]+)\]", command):
            assert set(name.split(",")) <= set(extras), f"{command}: pyproject.toml has no extra {name}"
        return
    starts = [i for i, w in enumerate(words) if w.endswith(".py")]
    launcher = words[: starts[0]] if starts else words
    assert launcher == ["python"] or launcher[:2] == ["accelerate", "launch"], f"not a command known here: {command}"
    script, args = ROOT / words[starts[0]], words[starts[0] + 1 :]
    assert script.is_file(), f"{command}: no {script.relative_to(ROOT)}"
    parser = script_parser(script, monkeypatch)
    if "..." in args:
        assert abbreviations, f"an abbreviated command (`...`) does not run as written: {command}"
        known = {s for action in parser._actions for s in action.option_strings}  # argparse has no public list
        flags = {a.split("=")[0] for a in args if a.startswith("--")}
        assert flags <= known, f"{command}: {script.name} has no {sorted(flags - known)}"
        return
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            parser.parse_args(args)
    except SystemExit as exit_:
        reason = errors.getvalue().strip().splitlines()[-1:]
        raise AssertionError(f"{script.name} refuses the arguments of: {command}: {reason}") from exit_


@pytest.mark.parametrize("command", README_COMMANDS, ids=[c[:60] for c in README_COMMANDS])
def test_readme_command_runs_as_written(command, monkeypatch):
    check_command(command, monkeypatch)


@pytest.mark.parametrize("page", sorted(PAGES))
def test_python_snippets_compile(page):
    for snippet in readme_blocks(("python",), PAGES[page]):
        compile(snippet, page, "exec")


def test_readme_is_short_and_has_a_runnable_snippet():
    assert README.count("\n") <= 210, "README.md is the five-minute page: details go to docs/"
    assert readme_blocks(("python",), README)


def test_setup_is_two_commands():
    setup = README.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    commands = [c for lang, body in FENCE.findall(setup) if lang in ("bash", "sh") for c in shell_commands(body)]
    assert commands == ["bash scripts/quickstart.sh", "bash scripts/test.sh"]


@pytest.mark.parametrize("page", sorted(PAGES))
def test_paths_the_readme_and_docs_name_exist(page):
    text = RESULTS.sub("", PAGES[page])
    restored = set(RESTORED.findall(text))
    named = {p.split("@")[0].rstrip(".,;:/") for p in PATH.findall(text)} - restored  # PATH@OPTS: a drafter spec
    missing = sorted(p for p in named if "<" not in p and not list(ROOT.glob(p)))
    assert not missing, f"{page} names paths that are not in the repository: {missing}"


def help_of(script: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-X", "importtime", str(script.relative_to(ROOT)), "--help"]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_every_script_helps_without_loading_torch_and_its_examples_run(monkeypatch):
    """--help exits 0, imports neither torch nor the hf_specdec package (so it comes at once), and every example
    command it shows is accepted by the script it names."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        helps = dict(zip(SCRIPTS, pool.map(help_of, SCRIPTS), strict=True))
    for script, done in helps.items():
        assert done.returncode == 0 and done.stdout.startswith("usage:"), f"{script.name} --help: {done.stderr[-2000:]}"
        imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import")}
        assert not imported & {"torch", "hf_specdec"}, f"{script.name} --help imports torch or the whole package"
        # a `\` at a line's end in a docstring joins the lines: the example shows up as one line with gaps
        run_together = [x for x in done.stdout.splitlines() if re.search(r"scripts/\w+\.py .*\S {4,}--", x)]
        assert not run_together, f"{script.name} --help runs an example's lines together: {run_together}"
        for command in shell_commands(done.stdout, starting=r"(python|accelerate launch) .*scripts/\w+\.py"):
            check_command(command, monkeypatch, abbreviations=True)

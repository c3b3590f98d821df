"""A benchmark's markdown report (benchmark.md of scripts/benchmark.py) copied into README.md between the markers
`<!-- results:start -->` and `<!-- results:end -->`, unchanged but for its headings, so the README's figures are
the benchmark's own."""

from __future__ import annotations

from pathlib import Path

START, END = "<!-- results:start -->", "<!-- results:end -->"


def as_readme_section(report: str) -> str:
    """The report with every heading demoted to level 4, to sit inside a README section."""
    report = report.strip().replace("\n# ", "\n#### ").replace("\n## ", "\n#### ")
    return "####" + report[1:] if report.startswith("# ") else report


def insert_report(report: str | Path, readme: str | Path = "README.md") -> None:
    """Replace what is between the markers in `readme` with the report at `report`; ValueError without markers."""
    text = Path(readme).read_text(encoding="utf-8")
    if START not in text or END not in text:
        raise ValueError(f"{readme} has no {START} ... {END} section")
    head, rest = text.split(START, 1)
    tail = rest.split(END, 1)[1]
    section = as_readme_section(Path(report).read_text(encoding="utf-8"))
    Path(readme).write_text(f"{head}{START}\n{section}\n{END}{tail}", encoding="utf-8")
    print(f"updated {readme} from {report}")

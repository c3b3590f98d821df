"""Host work per speculative step (ms outside model forwards) of hf_specdec's loop and transformers' own, on tiny
random models where forwards cost almost nothing. See hf_specdec/bench/host_overhead.py for the method.

    # the full table (two context lengths, 12 methods, 3 timed calls each), on one torch thread, once the
    # machine's 1-minute load average is below 2.5
    python scripts/host_overhead.py --wait-load 2.5 --out-dir runs/host_overhead

    # a quick look at two methods
    python scripts/host_overhead.py --methods tree native-dflash --contexts 64 --repeats 1

Writes host_overhead.json (every figure, the machine, the versions) and host_overhead.md (the table) in --out-dir.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from command_line import HelpFormatter


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--methods", nargs="+", default=None, help="methods to time (default: all)")
    p.add_argument("--contexts", nargs="+", type=int, default=[64, 512], help="prompt lengths in tokens")
    p.add_argument("--new-tokens", type=int, default=64, help="tokens generated per timed call")
    p.add_argument("--repeats", type=int, default=3, help="timed calls per method and context (after a warm-up)")
    p.add_argument("--batch-size", type=int, default=4, help="rows of the batch methods")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--wait-load", type=float, default=0.0, help="first wait until the 1-min load average is below")
    p.add_argument("--out-dir", type=Path, default=Path("results/host_overhead"))
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    from hf_specdec.bench.host_overhead import METHODS, HostOverheadConfig, markdown, run_host_overhead, wait_for_quiet

    unknown = sorted(set(args.methods or ()) - set(METHODS))
    if unknown:
        p.error(f"unknown --methods {' '.join(unknown)}; choose from {' '.join(METHODS)}")
    args.methods = args.methods or list(METHODS)
    config = HostOverheadConfig(
        context_lengths=tuple(args.contexts),
        new_tokens=args.new_tokens,
        repeats=args.repeats,
        methods=tuple(args.methods),
        batch_size=args.batch_size,
        threads=args.threads,
    )
    waited = wait_for_quiet(args.wait_load) if args.wait_load > 0 else None
    report = run_host_overhead(config)
    report["environment"]["machine"]["load_average_waited_for"] = waited
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "host_overhead.json").write_text(json.dumps(report, indent=1))
    table = markdown(report)
    (args.out_dir / "host_overhead.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())

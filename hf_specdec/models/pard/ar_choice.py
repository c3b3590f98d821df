"""How each sampled block is drafted, chosen per block by what each way realized: the adaptive budget of sampled
PARD blocks.

With `DecodingSettings(budget="auto")` and exact-q sampling, a PARD drafter with `sampled_ar_drafts = M > 1` or
`sampled_base_drafts > 0` picks, before each sampled block, one of:
- "base": a dependent chain from its base LM (`base_chain.py`), when `sampled_base_drafts` is set;
- m in 1..M (every count up to 4, then about 1.5x apart: `choices`): drafts 1..m drawn one adapter pass each, the
  rest from pass m's mask slots; only without a base-LM chain;
- "plain": no drafter pass and no drafts (a plain step, plus the prompt-lookup branch if it is on).

With a base-LM chain the choice is between "base" and "plain" only: at T=1 and T=0.7 every block a chain, verified
whole, measured 1.12x and 1.10x faster than the choice that also held adapter drafts with the budget cutting its
chains (docs/verification.md 1.4); kept whole under that choice, adapter drafts won it on creative text where they
did not pay over whole calls.

What pays depends on the machine (a drafter pass against a verify forward), on the text and on the temperature (how
often the target keeps a sampled draft). So each is judged by its realized rate, committed tokens per second of
whole steps (drafter passes, the verify forward, acceptance), over its last `RECENT` steps:

1) every choice is tried until it has `TRIED` judged steps (in the order above);
2) then the current choice (at first the first above) runs until another's rate beats its rate by `MARGIN` standard
   errors of their difference, and that one becomes current; every `PROBE_EVERY` steps the choice tried longest ago
   runs instead (twice in a row when it drafts, see below), so a change of text (code to prose) is seen. A probe
   whose choice loses clearly (its recent rate below the current one by `MARGIN` standard errors and, with the
   probe's own step, by `CLEARLY`) doubles the steps to the next probe, up to `MAX_PROBE_EVERY`; one that does not
   sets them back to `PROBE_EVERY`. On an AVX2 CPU, where a base-LM chain committed 2.2-2.5 tokens/s against plain
   steps' 4.1-4.9, calls at T=1 ran at 0.76-1.01x of plain sampling with a probe every 16 blocks, 0.85-0.99x with
   the back-off.

The margin is there because a sampled step's committed tokens are noisy (a base-LM chain commits 1 to 20 at T=1):
judged on plain means, a few unlucky chains handed the choice to shorter blocks that measured slower when run on
every block (docs/verification.md 1.4). Rates that differ by more than their noise still move it at once.

A step whose drafter first caught up on more than `CATCH_UP` committed tokens (the base LM reading the prompt on its
first chain of a call) is not judged: the catch-up says nothing of the way the block was drafted. A probe of a way
that drafts runs twice in a row: its first step catches the drafter's cache up on every token committed since that
way last ran, and the second is the probe's judged step, into the rate and for the back-off whatever it read. Judged
on the first, a probe carried a catch-up that grows with the steps between probes (16, 32, ... 128 plain steps'
tokens), a cost no run of that way pays once it is current: once plain steps led on a stretch of text, chains could
lose every probe for the catch-up alone. At T=0.7 on HumanEval, where the lookup branch beside plain steps copies
long spans, chains ran on 78 of 224 blocks with such probes, against 588 of 594 on the other families
(`results/sampling/2026-12-08-t0.7-96-tokens-family26/`).

This choice decides the plain steps of such calls (`Budget.plain_steps` is off for them): the budget's own plain
steps, judged over steps of every choice at once, sent T=1 calls to plain steps while a choice that pays was still
untried (docs/verification.md 1.4). "plain" keeps such calls from running slower than plain sampling where no draft
pays. A base-LM chain is verified whole (`Budget.cuts` off: its passes are paid and its own stop chose its length;
cut to the budget's size it was held to 7 drafts); adapter drafts are cut to the nodes worth verifying.

With `sampled_choice_context="copying"` a row that is copying a span (its previous step accepted a prompt-lookup
node) chooses from a memory of its own: there the lookup branch alone may commit as much as a drafted block. It is
off by default: at T=0.7 it measured slower than one memory (docs/verification.md 1.4), each memory paying its own
tries of every choice, long base-LM chains included.

Greedy blocks with `greedy_base_drafts` choose the same way between "block" (the adapter's tree, cut by the
budget) and "base" (the base LM's argmax chain, verified whole), in a memory of their own (`greedy_choice_of`);
there the budget keeps its plain steps (`Budget.plain_steps`), so "plain" is not among the choices. Both ways keep
a cache that only catches up when they run, so a probe of the way not current first catches up on every token
committed since it last ran (an unjudged step): a greedy probe runs twice in a row, and the second step is judged.
Nor is either way first by default: once both are tried, the better rate becomes current (on GSM8K the chains
committed 2.2x of plain against the tree's 1.8x, on HumanEval the tree led).

The choice reads only finished steps, never the draws of the step it is made for, so every draft is still drawn
from the q its tree carries: the output distribution is the target's whatever is chosen. The memories live on the
drafter (`choice_of`), so they carry from one `generate` call to the next.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

RECENT = 16  # judged steps kept per choice
TRIED = 3  # judged steps every choice gets before rates decide
PROBE_EVERY = 16  # steps between runs of the choice tried longest ago
MAX_PROBE_EVERY = 128  # ... at most, after probes that lost clearly
CLEARLY = 0.2  # a probed choice this far below the current rate (and beyond the noise) loses clearly
MARGIN = 2.0  # standard errors by which another choice's rate must beat the current one's to take over
# a block whose first drafter pass reads more committed tokens than this (the prompt, a long run of plain steps) is
# not judged: that catch-up is paid once, whatever is chosen after it
CATCH_UP = 32


@dataclass
class ArChoice:
    """The per-block choice ("base" with `base`, else m in 1..`largest`; "plain") and what each choice realized."""

    largest: int
    base: bool = False  # a base-LM chain is one of the choices
    greedy: bool = False  # greedy blocks: "block" (the adapter's tree) or "base" (the base LM's argmax chain)
    steps: int = 0
    recent: dict[int | str, deque] = field(default_factory=dict)  # choice -> (committed, seconds) of its last steps
    last_run: dict[int | str, int] = field(default_factory=dict)  # choice -> the step it last ran at
    runs: dict[int | str, int] = field(default_factory=dict)  # choice -> steps it was chosen for (a report shows)
    current: int | str | None = None  # the choice that runs between probes once every one was tried
    again: int | str | None = None  # a greedy probe's second step, run next
    every: int = PROBE_EVERY  # steps between probes now (doubled after a probe that lost clearly)
    next_probe: int = PROBE_EVERY  # the step the next probe runs at
    probing: int | str | None = None  # the sampled choice a probe is running, until its step is learned

    options: list[int | str] = field(init=False)  # "base" or the counts (`choices`), "plain": worked out once

    def __post_init__(self) -> None:
        if self.greedy:
            self.options = ["block", "base"]
        else:
            self.options = (["base"] if self.base else choices(self.largest)) + ["plain"]

    def rule_out(self, m: int | str) -> None:
        """Never choose m again (the machine, not the text, says it cannot pay: no try, no probe); the last option
        stays."""
        if m in self.options and len(self.options) > 1:
            self.options = [o for o in self.options if o != m]
            if self.current == m:
                self.current = None

    def choose(self) -> int | str:
        """The m for the next sampled block."""
        self.steps += 1
        options = self.options
        untried = [m for m in options if len(self.recent.get(m, ())) < TRIED]
        if untried:
            m = untried[0]
        elif self.again is not None:
            m, self.again = self.again, None
            self.probing = None if self.greedy else m  # the step after the catch-up is the probe's judged one
        elif self.steps >= self.next_probe:
            m = min(options, key=lambda m: self.last_run.get(m, -1))
            self.again = m if m != self.current and m != "plain" else None  # a drafter's cache catches up first
            self.probing = None if self.greedy or self.again is not None else m
            self.next_probe = self.steps + self.every
        else:
            m = self.current = self._leader()
        self.last_run[m] = self.steps
        self.runs[m] = self.runs.get(m, 0) + 1
        return m

    def learn(self, m: int | str, committed: int, seconds: float) -> None:
        """One finished step that drafted with `m`: `committed` tokens in `seconds`."""
        if seconds > 0:
            self.recent.setdefault(m, deque(maxlen=RECENT)).append((committed, seconds))
        self.probed(m, committed, seconds)

    def probed(self, m: int | str, committed: int, seconds: float) -> None:
        """A finished step of m, judged or not: if it was a probe's, the next probe comes later where it lost
        clearly, else as usual. A probe that first read the prompt (the first block of a call) is not judged into
        m's rate, but it is what probing costs there."""
        if m == self.probing:
            self.probing = None
            lost = seconds > 0 and self._loses_clearly(m, committed / seconds)
            self.every = min(MAX_PROBE_EVERY, 2 * self.every) if lost else PROBE_EVERY
            self.next_probe = self.steps + self.every

    def rate(self, m: int | str) -> float:
        """Committed tokens per second of m's recent steps (0 before any)."""
        seen = self.recent.get(m, ())
        seconds = sum(s for _, s in seen)
        return sum(c for c, _ in seen) / seconds if seconds else 0.0

    def rate_error(self, m: int | str) -> float:
        """The standard error of `rate(m)` as a ratio estimator: sqrt(sum (c_i - r s_i)^2 / (n - 1)) sqrt(n) / sum s_i
        over m's recent steps (0 with fewer than two)."""
        seen, r = self.recent.get(m, ()), self.rate(m)
        n, seconds = len(seen), sum(s for _, s in seen)
        if n < 2 or not seconds:
            return 0.0
        spread = sum((c - r * s) ** 2 for c, s in seen) / (n - 1)
        return (spread * n) ** 0.5 / seconds

    def _loses_clearly(self, m: int | str, probed: float) -> bool:
        """Whether m's rate is below the current choice's by `MARGIN` standard errors of their difference, and both
        it and the probe's own rate (`probed`, tokens per second) are below the current rate by `CLEARLY` of it (a
        probe that did well brings probes back at once, where m's recent steps would take many probes to move)."""
        now = self.current
        if now is None or now == m:
            return False
        noise = (self.rate_error(m) ** 2 + self.rate_error(now) ** 2) ** 0.5
        gap, bar = self.rate(now) - self.rate(m), (1 - CLEARLY) * self.rate(now)
        return gap > MARGIN * noise and self.rate(m) < bar and probed < bar

    def _leader(self) -> int | str:
        """The current choice, or the best rate where it beats the current one's by `MARGIN` standard errors."""
        best = max(self.options, key=self.rate)
        first = max(self.options, key=self.rate) if self.greedy else self.options[0]  # no incumbent yet
        now = self.current if self.current is not None else first
        if best == now:
            return now
        noise = (self.rate_error(best) ** 2 + self.rate_error(now) ** 2) ** 0.5
        return best if self.rate(best) - self.rate(now) > MARGIN * noise else now


def choices(largest: int) -> list[int]:
    """The m tried for `largest`: every count up to 4, then about 1.5x apart (1, 2, 3, 4, 6, 9, 13, ...), ending at
    `largest` itself, so a long dependent chain costs a few tries, not one per count."""
    options, m = list(range(1, min(largest, 4) + 1)), 4
    while m < largest:
        m += max(2, m // 2)
        if largest - m < max(2, m // 2) // 2:  # past or close to `largest`: it is the last
            m = largest
        options.append(m)
    return options


def choice_of(drafter, largest: int, base: bool = False, context: str = "") -> ArChoice:
    """The drafter's choice memory for `largest` and `base` in `context` ("" for every block, "copying" for those of
    a row copying a span); new ones when the settings changed. `drafter._ar_choice` is the one of "" (every block,
    or those of rows not copying)."""
    memories = getattr(drafter, "_ar_choices", None)
    if memories is None or (memories[""].largest, memories[""].base) != (largest, base):
        memories = {"": ArChoice(largest, base)}
        drafter._ar_choices = memories  # on the drafter object, not in its config: never saved
        drafter._ar_choice = memories[""]
    if context not in memories:
        memories[context] = ArChoice(largest, base)
    return memories[context]


def greedy_choice_of(drafter) -> ArChoice:
    """The drafter's memory of greedy blocks ("block" or "base"), made on first use; it carries between calls."""
    memory = getattr(drafter, "_greedy_choice", None)
    if memory is None:
        memory = drafter._greedy_choice = ArChoice(largest=0, greedy=True)  # on the object: never saved
    return memory


def blocks_by_choice(drafter) -> dict[str, int]:
    """How many blocks the drafter's choices have drafted each way so far (sampled: "base", "1", "2", ..., "plain";
    greedy: "greedy block", "greedy base"), over all its memories; {} for a drafter that has not chosen."""
    counts: dict[str, int] = {}
    greedy = getattr(drafter, "_greedy_choice", None)
    for m, n in (greedy.runs if greedy is not None else {}).items():
        counts[f"greedy {m}"] = n
    for memory in getattr(drafter, "_ar_choices", {}).values():
        for m, n in memory.runs.items():
            counts[str(m)] = counts.get(str(m), 0) + n
    return counts


__all__ = ["ArChoice", "blocks_by_choice", "choice_of", "choices", "greedy_choice_of"]

"""How many sampled drafts get a drafter pass of their own, chosen per step by what each choice realized.

With `DecodingSettings(budget="auto", sampled_ar_drafts=M)` a PARD drafter picks, before each sampled block, m in
1..M (every count up to 4, then about 1.5x apart: `choices`): drafts 1..m drawn one pass each (a dependent block),
the rest from pass m's mask slots. A larger m buys acceptance with drafter passes, and what pays depends on the
machine (a pass against a verify forward) and on the text (how often the target keeps a sampled draft). So each m
is judged by its realized rate, committed tokens per second of whole steps (drafter passes, the verify forward,
acceptance), over its last `RECENT` steps:

1) every m is tried until it has `TRIED` judged steps (smallest first);
2) then the best rate wins; every `PROBE_EVERY` steps the m tried longest ago runs once instead, so a change of
   text (code to prose) is seen.

The choice reads only finished steps, never the draws of the step it is made for, so every draft is still drawn
from the q its tree carries: the output distribution is the target's whatever is chosen. The memory lives on the
drafter (`choice_of`), so it carries from one `generate` call to the next, like the budget's.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

RECENT = 8  # judged steps kept per choice
TRIED = 3  # judged steps every choice gets before rates decide
PROBE_EVERY = 16  # steps between runs of the choice tried longest ago


@dataclass
class ArChoice:
    """The per-step choice of m in 1..`largest` and what each m realized."""

    largest: int
    steps: int = 0
    recent: dict[int, deque] = field(default_factory=dict)  # m -> (committed, seconds) of its last judged steps
    last_run: dict[int, int] = field(default_factory=dict)  # m -> the step it last ran at
    runs: dict[int, int] = field(default_factory=dict)  # m -> steps it was chosen for (what a report shows)

    options: list[int] = field(init=False)  # the counts tried (`choices`), worked out once

    def __post_init__(self) -> None:
        self.options = choices(self.largest)

    def choose(self) -> int:
        """The m for the next sampled block."""
        self.steps += 1
        options = self.options
        untried = [m for m in options if len(self.recent.get(m, ())) < TRIED]
        if untried:
            m = untried[0]
        elif self.steps % PROBE_EVERY == 0:
            m = min(options, key=lambda m: self.last_run.get(m, -1))
        else:
            m = max(options, key=self.rate)
        self.last_run[m] = self.steps
        self.runs[m] = self.runs.get(m, 0) + 1
        return m

    def learn(self, m: int, committed: int, seconds: float) -> None:
        """One finished step that drafted with `m`: `committed` tokens in `seconds`."""
        if seconds > 0:
            self.recent.setdefault(m, deque(maxlen=RECENT)).append((committed, seconds))

    def rate(self, m: int) -> float:
        """Committed tokens per second of m's recent steps (0 before any)."""
        seen = self.recent.get(m, ())
        seconds = sum(s for _, s in seen)
        return sum(c for c, _ in seen) / seconds if seconds else 0.0


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


def choice_of(drafter, largest: int) -> ArChoice:
    """The drafter's choice memory for `largest` (a new one when the setting changed)."""
    choice = getattr(drafter, "_ar_choice", None)
    if choice is None or choice.largest != largest:
        choice = ArChoice(largest)
        drafter._ar_choice = choice  # on the drafter object, not in its config: never saved
    return choice


__all__ = ["ArChoice", "choice_of", "choices"]

"""Acceptance statistics of one speculative `generate()` call."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class BatchForwards:
    """Target forwards run for rows that decode together; the batch counts them, its rows share this object."""

    prefill: int = 0
    verify: int = 0


@dataclass
class AcceptanceStats:
    """What the drafter achieved in one `generate()` call.

    After `target.generate(..., assistant_model=drafter)`, read `drafter.last_acceptance_stats`.

    A *row step* is one sequence verified by one target forward. For one sequence every verification forward is
    one row step; in a batch one forward verifies every running row, so a 2-row batch makes about twice as many
    row steps as target forwards. tau and the histogram are per row step; the forward counts are real forwards.

    Attributes:
        block_size: the drafter's block size (anchor included), so histogram bins run 0 .. block_size - 1 (more
            when a prompt-lookup branch is accepted past the block).
        accepted: draft tokens accepted at each row step (the bonus token not counted).
        drafted: draft tokens proposed at each row step.
        prefill_forwards: target forwards that only processed prompts (they commit one token per row).
        verify_forwards: target forwards that verified drafts (one forward verifies every row of a batch).
        batch: for rows decoded together, the count of forwards their batch ran, one object shared by its rows;
            `combine` reads it so that a forward that served several rows counts once.
    """

    block_size: int
    accepted: list[int] = field(default_factory=list)
    drafted: list[int] = field(default_factory=list)
    prefill_forwards: int = 0
    verify_forwards: int = 0
    batch: BatchForwards | None = field(default=None, repr=False, compare=False)

    def record(self, num_drafted: int, num_accepted: int) -> None:
        """One row step; for this row alone it is also one verification forward."""
        self.drafted.append(int(num_drafted))
        self.accepted.append(int(num_accepted))
        self.verify_forwards += 1

    @property
    def row_steps(self) -> int:
        """Rows verified, summed over verification forwards (equal to `verify_forwards` for one sequence)."""
        return len(self.accepted)

    @property
    def target_forwards(self) -> int:
        """Target forwards run: prefill and verification, each counted once however many rows it served."""
        return self.verify_forwards + self.prefill_forwards

    @property
    def committed_tokens(self) -> int:
        """Tokens committed by verification: accepted drafts plus one bonus token per row step."""
        return sum(self.accepted) + self.row_steps

    @property
    def tau(self) -> float:
        """Mean tokens committed per row and verification forward (per row step), bonus included (1.0 = no draft
        ever accepted). For one sequence: tokens committed per verification forward."""
        return self.committed_tokens / self.row_steps if self.row_steps else 0.0

    @property
    def plain_steps(self) -> int:
        """Row steps that verified no draft: the adaptive budget ran a plain one-token step because drafting did not
        pay on this machine (docs/budget.md), or no room was left to draft."""
        return sum(1 for d in self.drafted if d == 0)

    @property
    def drafted_tau(self) -> float:
        """tau over the row steps that verified drafts: what the drafter achieves when it runs (`tau` also counts
        plain steps, each committing one token)."""
        steps = [a for a, d in zip(self.accepted, self.drafted, strict=True) if d]
        return (sum(steps) + len(steps)) / len(steps) if steps else 0.0

    @property
    def acceptance_rate(self) -> float:
        """Accepted draft tokens over proposed draft tokens."""
        total = sum(self.drafted)
        return sum(self.accepted) / total if total else 0.0

    @property
    def histogram(self) -> list[int]:
        """histogram[a] = row steps (for one sequence: verification forwards) that accepted exactly `a` drafts."""
        counts = [0] * max(self.block_size, max(self.accepted, default=0) + 1)  # trees can accept deeper
        for a in self.accepted:
            counts[a] += 1
        return counts

    @classmethod
    def combine(cls, parts: list[AcceptanceStats]) -> AcceptanceStats:
        """Several rows' statistics as one (batched decoding): every row step counts in tau and the histogram, and
        the forward counts are the real ones: the forwards of each batch the rows decoded in, counted once."""
        out = cls(block_size=max(p.block_size for p in parts))
        batches: dict[int, BatchForwards] = {}
        for p in parts:
            out.accepted += p.accepted
            out.drafted += p.drafted
            if p.batch is None:
                out.prefill_forwards += p.prefill_forwards
                out.verify_forwards += p.verify_forwards
            else:
                batches[id(p.batch)] = p.batch
        for forwards in batches.values():
            out.prefill_forwards += forwards.prefill
            out.verify_forwards += forwards.verify
        return out

    def to_dict(self) -> dict:
        return {
            "block_size": self.block_size,
            "tau": self.tau,
            "acceptance_rate": self.acceptance_rate,
            "verify_forwards": self.verify_forwards,
            "target_forwards": self.target_forwards,
            "row_steps": self.row_steps,
            "committed_tokens": self.committed_tokens,
            "histogram": self.histogram,
        }


__all__ = ["AcceptanceStats", "BatchForwards"]

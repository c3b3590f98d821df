"""Acceptance statistics of one speculative `generate()` call."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class AcceptanceStats:
    """What the drafter achieved in one `generate()` call.

    After `target.generate(..., assistant_model=drafter)`, read `drafter.last_acceptance_stats`.

    Attributes:
        block_size: the drafter's block size (anchor included), so histogram bins run 0 .. block_size - 1 (more
            when a prompt-lookup branch is accepted past the block).
        accepted: draft tokens accepted at each verification forward (the bonus token not counted).
        drafted: draft tokens proposed at each verification forward.
        prefill_forwards: target forwards that only processed the prompt (they commit one token each).
    """

    block_size: int
    accepted: list[int] = field(default_factory=list)
    drafted: list[int] = field(default_factory=list)
    prefill_forwards: int = 0

    def record(self, num_drafted: int, num_accepted: int) -> None:
        self.drafted.append(int(num_drafted))
        self.accepted.append(int(num_accepted))

    @property
    def verify_forwards(self) -> int:
        """Target forwards after the prefill, each verifying one block."""
        return len(self.accepted)

    @property
    def target_forwards(self) -> int:
        return self.verify_forwards + self.prefill_forwards

    @property
    def committed_tokens(self) -> int:
        """Tokens committed by verification forwards: accepted drafts plus one bonus token each."""
        return sum(self.accepted) + self.verify_forwards

    @property
    def tau(self) -> float:
        """Mean tokens committed per verification forward, bonus included (1.0 = no draft ever accepted)."""
        return self.committed_tokens / self.verify_forwards if self.verify_forwards else 0.0

    @property
    def acceptance_rate(self) -> float:
        """Accepted draft tokens over proposed draft tokens."""
        total = sum(self.drafted)
        return sum(self.accepted) / total if total else 0.0

    @property
    def histogram(self) -> list[int]:
        """histogram[a] = verification forwards that accepted exactly `a` draft tokens."""
        counts = [0] * max(self.block_size, max(self.accepted, default=0) + 1)  # trees can accept deeper
        for a in self.accepted:
            counts[a] += 1
        return counts

    @classmethod
    def combine(cls, parts: list[AcceptanceStats]) -> AcceptanceStats:
        """Several rows' statistics as one (batched decoding): every row's verification counts once."""
        out = cls(block_size=max(p.block_size for p in parts))
        for p in parts:
            out.accepted += p.accepted
            out.drafted += p.drafted
            out.prefill_forwards += p.prefill_forwards
        return out

    def to_dict(self) -> dict:
        return {
            "block_size": self.block_size,
            "tau": self.tau,
            "acceptance_rate": self.acceptance_rate,
            "verify_forwards": self.verify_forwards,
            "target_forwards": self.target_forwards,
            "committed_tokens": self.committed_tokens,
            "histogram": self.histogram,
        }


__all__ = ["AcceptanceStats"]

"""The replay drafter: benchmark-only acceptance on random weights (DESIGN.md §3.3).

It runs the real drafter's forward at the real shape (so its cost is real), then replaces the
proposal with the reference continuation for the first k positions and a wrong token after them, k
drawn from an acceptance profile. The target verifies the block at full cost; the step then keeps
exactly k drafts plus the target's own token after them (a simulated acceptance length, like SGLang's
SIMULATE_ACC_LEN: on random bf16 weights the verify and the recorded AR continuation disagree at
near-ties, so the profile, not the numerics, must set acceptance). How many of the k drafts the
target really agreed with is recorded in ``agreed``. Never lossless, never served: only bench and
test code construct it.
"""

import dataclasses

import torch


@dataclasses.dataclass(frozen=True)
class AcceptanceProfile:
    """P(k drafts accepted), k = 0..B-1, for one block size; ``tau`` = E[k] + 1 (bonus included)."""

    probs: tuple[float, ...]
    name: str = "custom"

    @property
    def tau(self) -> float:
        return 1.0 + sum(k * p for k, p in enumerate(self.probs))

    @classmethod
    def from_histogram(cls, counts, name: str = "histogram") -> "AcceptanceProfile":
        total = float(sum(counts))
        return cls(tuple(c / total for c in counts), name)

    @classmethod
    def fixed(cls, num_accepted: int, block_size: int) -> "AcceptanceProfile":
        probs = [0.0] * block_size
        probs[num_accepted] = 1.0
        return cls(tuple(probs), f"fixed:{num_accepted}")

    @classmethod
    def parametric(cls, tau: float, block_size: int) -> "AcceptanceProfile":
        """Per-position acceptance rate a (P(k >= j) = a^j), solved so that the mean equals ``tau``."""
        max_tau = float(block_size)
        if not 1.0 <= tau <= max_tau:
            raise ValueError(f"tau {tau} outside [1, {max_tau}] for block size {block_size}")
        lo, hi = 0.0, 1.0
        for _ in range(100):
            a = (lo + hi) / 2
            mean = 1.0 + sum(a ** j for j in range(1, block_size))
            lo, hi = (a, hi) if mean < tau else (lo, a)
        survive = [a ** j for j in range(block_size)] + [0.0]
        probs = [survive[k] - survive[k + 1] for k in range(block_size)]
        return cls(tuple(probs), f"tau:{tau:g}")

    def truncated(self, block_size: int) -> "AcceptanceProfile":
        """The same drafter verifying only the first ``block_size`` positions of its block: P(k)
        unchanged below ``block_size - 1``, everything longer cut to ``block_size - 1`` drafts."""
        if not 1 <= block_size <= len(self.probs):
            raise ValueError(f"cannot truncate a block-{len(self.probs)} profile to {block_size}")
        probs = self.probs[:block_size - 1] + (sum(self.probs[block_size - 1:]),)
        return AcceptanceProfile(probs, self.name if block_size == len(self.probs)
                                 else f"{self.name}[:{block_size}]")

    def sample(self, generator: torch.Generator) -> int:
        u = torch.rand((), generator=generator).item()
        acc = 0.0
        for k, p in enumerate(self.probs):
            acc += p
            if u < acc:
                return k
        return len(self.probs) - 1


@dataclasses.dataclass
class ReplayPlan:
    """Per-request replay state: the target's own greedy continuation and the profile to draw from."""

    reference: list[int]
    profile: AcceptanceProfile
    vocab_size: int
    seed: int = 0
    drawn: list[int] = dataclasses.field(default_factory=list)
    agreed: list[int] = dataclasses.field(default_factory=list)

    def __post_init__(self):
        self._generator = torch.Generator().manual_seed(self.seed)
        self._ahead: list[int] = []  # draws taken ahead of their steps (draw_ahead)

    def draw_ahead(self, num_steps: int) -> list[int]:
        """The next ``num_steps`` draws, taken now (a batched engine replays them on the device);
        :meth:`override` and :meth:`record` use them in order before drawing more."""
        self._ahead += [self.profile.sample(self._generator) for _ in range(num_steps)]
        return list(self._ahead)

    def _draw(self) -> int:
        return self._ahead.pop(0) if self._ahead else self.profile.sample(self._generator)

    def record(self, num_drafts: int) -> int:
        """Take the next draw for a step of ``num_drafts`` drafts, capped to them, and append it
        to ``drawn`` (a batched engine built that step's drafts from the same draw)."""
        k = min(self._draw(), num_drafts)
        self.drawn.append(k)
        return k

    def override(self, generated_so_far: int, num_drafts: int) -> list[int]:
        """Draft tokens for the step whose first draft is generated token ``generated_so_far``."""
        k = self.record(num_drafts)
        ref = self.reference[generated_so_far:generated_so_far + num_drafts]
        ref = ref + [0] * (num_drafts - len(ref))  # past the reference: any token will do
        # reference for the first k positions, then a token that is certainly not the target's choice
        return [tok if j < k else (tok + 1) % self.vocab_size for j, tok in enumerate(ref)]

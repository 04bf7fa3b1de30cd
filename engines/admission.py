"""When queued requests join a running batch: as soon as a row is free, or in groups.

Each admission is a prefill forward that every running row waits for. When requests finish at
different steps (speculative decoding: each row keeps a different number of tokens per step), joining
at once means one such stall per finishing step. Grouped admission (the recipe's ``admit_ratio`` and
``admit_max_wait_steps``, after TGI's waiting-served ratio and max waiting tokens) lets the free rows
wait until enough requests can join together, and never longer than a bounded number of steps.
Which tokens a request gets does not depend on when it joins, so this is lossless by construction.
"""

import dataclasses


@dataclasses.dataclass
class Admission:
    ratio: float = 0.0
    """Join once ``joinable >= ratio * running`` (0: at once)."""
    max_wait_steps: int = 0
    """... or once a joinable request has waited this many decode steps."""
    waited_steps: int = 0

    @classmethod
    def for_recipe(cls, recipe) -> "Admission":
        return cls(recipe.admit_ratio, recipe.admit_max_wait_steps)

    def ready(self, joinable: int, running: int) -> bool:
        """Whether ``joinable`` queued requests (those free rows can take) join now, ``running``
        requests decoding. Called once per scheduler iteration: a False counts one waited step."""
        if joinable <= 0:
            self.waited_steps = 0
            return False
        if (running == 0 or self.ratio == 0 or joinable >= self.ratio * running
                or self.waited_steps >= self.max_wait_steps):
            self.waited_steps = 0
            return True
        self.waited_steps += 1
        return False

"""Train the tiny proxy pair of the CPU embedded default on the bundled gsm8k text (CPU, seeded).

Two stages, both through the engine's own model modules, so the weights they save load unchanged:

1. :func:`train_target`: a small Qwen3.5-architecture hybrid (Gated DeltaNet + gated attention) as a
   causal LM on the gsm8k training split (question, newline, worked answer, end-of-text).
2. :func:`train_drafter`: a DFlash2 drafter on the target's own features and its greedy
   continuations of gsm8k training questions (:func:`greedy_continuations`), with the
   block-diffusion objective: from the context features and the anchor token, predict the next
   ``block_size - 1`` tokens from mask tokens in one forward.

:func:`save_checkpoint` writes HF-format directories (config.json + bf16 model.safetensors).
``experiments/proxy/train_tiny.py`` runs the whole recipe; its README records seeds, sizes and times.
"""

from specpilot.training.checkpoint import save_checkpoint
from specpilot.training.continuations import Continuation
from specpilot.training.continuations import greedy_continuations
from specpilot.training.drafter import DRAFTER_CONFIG
from specpilot.training.drafter import DrafterTraining
from specpilot.training.drafter import train_drafter
from specpilot.training.target import TARGET_CONFIG
from specpilot.training.target import TargetTraining
from specpilot.training.target import train_target

__all__ = [
    "DRAFTER_CONFIG",
    "TARGET_CONFIG",
    "Continuation",
    "DrafterTraining",
    "TargetTraining",
    "greedy_continuations",
    "save_checkpoint",
    "train_drafter",
    "train_target",
]

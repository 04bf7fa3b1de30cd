"""SpecPilot: find, prove lossless and ship the fastest speculative-decoding engine for a deployment.

Layout (DESIGN.md §1): ``specpilot`` holds settings, recipes, validation (token forcing), the CLI and
the other core services; ``specpilot.engines`` the model code, caches and decode loops;
``specpilot.kernels`` the Triton kernels with their torch references; ``specpilot.search`` and
``specpilot.workers`` the campaign.
"""

__version__ = "0.1.0"

"""Decode loops: prefill, the AR step, the block-drafter speculative step, and acceptance."""

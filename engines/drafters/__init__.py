"""Drafter-side helpers that are not model families (the benchmark-only replay drafter)."""

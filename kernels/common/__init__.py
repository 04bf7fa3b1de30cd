"""Shared by the kernel ops: interpreter support, split-K launch, checks, timers, roofline."""

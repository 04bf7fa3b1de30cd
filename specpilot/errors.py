"""Errors whose message is the whole story for the user; the CLI prints them without a traceback."""


class SpecPilotError(Exception):
    """Base class: bad input, missing weights, an unbuilt feature asked for, ..."""


class CheckpointError(SpecPilotError, ValueError):
    """A checkpoint directory or config that cannot be loaded (missing shard, unknown architecture, ...)."""


class NotBuiltError(SpecPilotError, RuntimeError):
    """A feature that is designed but not built yet; the message names the issue that builds it."""

"""One module per ``specpilot`` command (see ``specpilot.cli``)."""

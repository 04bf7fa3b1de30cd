"""The search campaign (DESIGN.md §7): driver, proposal agents, mechanism catalog, kernel
sub-agent, MLflow records and the knowledge store. Entry points: ``specpilot search SETTING`` and
``python -m specpilot.search SETTING`` (the Ray job entrypoint)."""

"""The search campaign (issue: the search campaign). Not built yet: ``specpilot search`` says so."""

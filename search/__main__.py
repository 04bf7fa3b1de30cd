"""``python -m specpilot.search SETTING [...]``: the campaign driver (the Ray job entrypoint)."""

import sys

from specpilot.cli import main

sys.exit(main(["search", *sys.argv[1:]]))

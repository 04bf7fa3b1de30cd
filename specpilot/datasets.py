"""The bundled prompt sets (specpilot/data, licences in NOTICE.md) and user prompt files."""

import json
from pathlib import Path

from specpilot.errors import SpecPilotError

DATA_DIR = Path(__file__).parent / "data"
DATASETS = {
    "gsm8k": ("gsm8k_test.jsonl", "question"),
    "gsm8k_train": ("gsm8k_train.jsonl", "question"),
    "math500": ("math500_test.jsonl", "prompt"),
    "humaneval": ("humaneval_test.jsonl", "prompt"),
    "mbpp": ("mbpp.jsonl", "text"),
}


def read_jsonl(path: str | Path) -> list[dict]:
    rows = []
    try:
        with open(path, encoding="utf-8") as f:
            for line_no, line in enumerate(f, 1):
                if line.strip():
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError as err:
                        raise SpecPilotError(f"{path}:{line_no}: not valid JSON: {err}") from err
                    if not isinstance(row, dict):
                        raise SpecPilotError(f"{path}:{line_no}: expected a JSON object")
                    rows.append(row)
    except (OSError, UnicodeDecodeError) as err:
        raise SpecPilotError(f"cannot read {path}: {err}") from err
    return rows


def load_rows(name: str) -> list[dict]:
    """All rows of a bundled dataset."""
    if name not in DATASETS:
        raise SpecPilotError(f"unknown dataset {name!r}; bundled: {', '.join(DATASETS)}")
    return read_jsonl(DATA_DIR / DATASETS[name][0])


def load_prompts(name: str, limit: int | None = None) -> list[str]:
    """The prompt text of the first ``limit`` rows of a bundled dataset."""
    field = DATASETS.get(name, (None, None))[1]
    rows = load_rows(name)[:limit]
    return [row[field] for row in rows]


def prompts_file(path: str | Path, limit: int | None = None) -> list[str]:
    """Prompts from a JSONL file with one ``prompt`` field per line."""
    rows = read_jsonl(path)[:limit]
    missing = [i + 1 for i, row in enumerate(rows) if not isinstance(row.get("prompt"), str)]
    if missing:
        raise SpecPilotError(f"{path}: line(s) {missing[:5]} have no string 'prompt' field")
    return [row["prompt"] for row in rows]

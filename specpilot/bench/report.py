"""README results tables rendered from the committed JSON records in ``experiments/results``.

Every number in the README's results section comes from a record file, so none is typed by hand.
The tables live between ``<!-- results:begin -->`` and ``<!-- results:end -->``; ``render_readme``
replaces what is between them and ``specpilot report --check`` fails when the README is stale.
JSON files without a ``kind`` of bench / compare / score / batched_compare (e.g. one-off experiment
dumps) are listed as not rendered, and so is a record with ``superseded_by`` (the file that measured
the same thing again after a fix that changes its numbers): it stays committed, out of the tables.
"""

import datetime
import json
import os
import re
from pathlib import Path

from specpilot.errors import SpecPilotError

BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
KINDS = ("bench", "compare", "score", "batched_compare")


def load_results(results_dir: str | Path) -> tuple[list[dict], list[Path]]:
    """(records of a rendered kind, each with ``_file`` set; other JSON files), by file name."""
    records, skipped = [], []
    for path in sorted(Path(results_dir).glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise SpecPilotError(f"{path}: {err}") from err
        if isinstance(data, dict) and data.get("kind") in KINDS:
            records.append({**data, "_file": path})
        else:
            skipped.append(path)
    return records, skipped


def _num(value, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}g}"


def _device(record: dict) -> str:
    fp = record.get("fingerprint") or {}
    cc = fp.get("compute_capability")
    return f"{fp.get('gpu', '?')}" + (f" (sm {cc})" if cc and cc != "none" else "")


def _link(record: dict, base: Path) -> str:
    path = Path(os.path.relpath(record["_file"].resolve(), base.resolve()))
    return f"[{path.name}]({path.as_posix()})"


def _commit(record: dict) -> str:
    commit = (record.get("fingerprint") or {}).get("commit", "?")
    return commit[:7] + ("-dirty" if commit.endswith("-dirty") else "")


def _date(record: dict) -> str:
    """UTC date of the measurement: the record's timestamp, else the date in its file name."""
    if isinstance(record.get("timestamp"), (int, float)):
        return datetime.datetime.fromtimestamp(record["timestamp"], datetime.timezone.utc) \
            .strftime("%Y-%m-%d")
    found = re.search(r"\d{4}-\d{2}-\d{2}", record["_file"].name)
    return found.group(0) if found else "?"


def _spread(dist: dict | None) -> str:
    if not dist:
        return "–"
    return f"{_num(dist.get('median'))} ({_num(dist.get('p20'))}–{_num(dist.get('p80'))})"


def _table(header: list[str], rows: list[list[str]], empty: str) -> list[str]:
    if not rows:
        return [f"_{empty}_"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def render(records: list[dict], skipped: list[Path], base: Path, results_dir: Path) -> str:
    """The markdown between the markers; links are relative to ``base`` (the README's folder)."""
    superseded = [r for r in records if r.get("superseded_by")]
    records = [r for r in records if not r.get("superseded_by")]
    of = {kind: sorted((r for r in records if r["kind"] == kind),
                       key=lambda r: (r.get("setting") or "", r["_file"].name)) for kind in KINDS}
    speed, batched = [], []
    for r in of["bench"]:
        s = r["summary"]
        speed.append([r["setting"], r["engine"], r.get("acceptance", "?"), _device(r),
                      _num(s.get("tok_s")), _spread(s.get("ms_per_token")), _num(s.get("tau")),
                      str(s.get("num_prompts")), _commit(r), _link(r, base)])
        for level in r.get("levels", []) if r.get("scenario") == "cN" else []:
            batched.append([r["setting"], r["engine"], _device(r), str(level["concurrency"]),
                            _num(level["output_tok_s"]), _spread(level["request_latency_s"]),
                            _spread(level["ttft_ms"]), _link(r, base)])
    speedups = []
    for r in of["compare"]:
        lo, hi = r["ci95"]
        method = "interleaved" if r.get("interleaved", True) else "saved runs"
        speedups.append([r["setting"], r["a"]["engine"], r["b"]["engine"],
                         r.get("acceptance", "?"), _device(r), f"**{_num(r['median_speedup'])}**",
                         f"[{_num(lo)}, {_num(hi)}]", str(len(r["ratios"])), method,
                         r["stop_reason"], _commit(r), _date(r), _link(r, base)])
    throughput = []
    for r in of["batched_compare"]:
        for level in r["levels"]:
            if "error" in level:  # the level did not run (e.g. out of device memory)
                throughput.append([r["setting"], r["a"], r["b"], r.get("acceptance", "?"),
                                   _device(r), str(level["concurrency"]), "not run: "
                                   + level["error"].split(";")[0].split(" (")[0].replace("|", "/")]
                                  + ["–"] * 8 + [_commit(r), _date(r), _link(r, base)])
                continue
            lo, hi = level["ci95"]
            throughput.append([r["setting"], r["a"], r["b"], r.get("acceptance", "?"),
                               _device(r), str(level["concurrency"]),
                               f"**{_num(level['median_ratio'])}**", f"[{_num(lo)}, {_num(hi)}]",
                               str(len(level["ratios"])), _decode(level), _num(level["a_tok_s"]),
                               _num(level["b_tok_s"]), _num(level["a_p99_latency_s"]),
                               _num(level["b_p99_latency_s"]),
                               _num(level.get("speedup_bound", r.get("speedup_bound"))),
                               _commit(r), _date(r), _link(r, base)])
    throughput.sort(key=lambda row: (row[0], row[1], row[2], int(row[5])))  # by level, per pair
    quality = [[r["setting"], r["engine"], r["dataset"], f"{r['accuracy']:.1%}",
                f"{r['num_correct']}/{r['num_examples']}", _device(r), _link(r, base)]
               for r in of["score"]]
    folder = Path(os.path.relpath(Path(results_dir).resolve(), base.resolve())).as_posix()
    lines = [f"<!-- generated by `specpilot report` from {folder}/*.json: do not edit by hand -->",
             "", "**Speed, single request** (decode tok/s over all prompts; ms/token: median "
             "(p20–p80) across prompts)", ""]
    lines += _table(["setting", "engine", "acceptance", "device", "tok/s", "ms/token", "τ",
                     "prompts", "commit", "record"], speed, "no bench records yet")
    if batched:
        lines += ["", "**Batched serving** (closed loop at each concurrency; latency in s and "
                  "TTFT in ms: median (p20–p80))", ""]
        lines += _table(["setting", "engine", "device", "concurrency", "output tok/s",
                         "request latency", "TTFT", "record"], batched, "")
    lines += ["", "**Speedup, A/B** (per-prompt A time / B time; > 1: B is faster; bootstrap "
              "95% CI of the median)", ""]
    lines += _table(["setting", "A", "B", "acceptance", "device", "speedup", "95% CI", "pairs",
                     "method", "stopped by", "commit", "date", "record"], speedups,
                    "no compare records yet")
    if throughput:
        lines += ["", "**Throughput A/B under continuous batching** (B tok/s / A tok/s per "
                  "interleaved repetition; bootstrap 95% CI of the median; p99 request latency in "
                  "s; decode wall: the same ratio over the decode steps and the host work "
                  "between them, admissions (prefill rounds) left out, where the record has it; "
                  "bound: the cost model's speedup bound at the level's tau, for that many requests "
                  "decoded together where the record has it, else for one request)",
                  ""]
        lines += _table(["setting", "A", "B", "acceptance", "device", "concurrency",
                         "throughput ratio", "95% CI", "reps", "decode wall", "A tok/s",
                         "B tok/s", "A p99",
                         "B p99", "bound", "commit", "date", "record"], throughput, "")
    if any(str(r.get("acceptance", "")).startswith("replayed") for r in records):
        lines += ["", "Acceptance `replayed(...)`: the setting's target and drafter ran with **random "
                  "weights** of the full size, and each step's accepted length was drawn from the "
                  "named profile (`tau:X`: parametric at that tau; `profile:PAIR#DATASET`: measured "
                  "with the project's proxy pair); the speed is real, the tokens are not. "
                  "`measured`: real weights, real acceptance."]
    lines += ["", "**Quality sanity checks** (token forcing is the correctness proof)", ""]
    lines += _table(["setting", "engine", "dataset", "score", "correct", "device", "record"],
                    quality, "no score records yet")
    if skipped:
        names = ", ".join(f"`{p.name}`" for p in skipped)
        lines += ["", f"Not rendered (no bench/compare/score/batched_compare `kind`): {names}."]
    if superseded:
        names = ", ".join(f"`{r['_file'].name}` (by `{r['superseded_by']}`)" for r in superseded)
        lines += ["", f"Superseded, not rendered: {names}."]
    return "\n".join(lines)


def render_readme(readme: str | Path, results_dir: str | Path) -> tuple[str, str]:
    """(current README text, the text with freshly rendered tables between the markers)."""
    readme = Path(readme)
    text = readme.read_text()
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise SpecPilotError(f"{readme} needs exactly one {BEGIN} ... {END} block where the "
                             "results tables go")
    records, skipped = load_results(results_dir)
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    body = render(records, skipped, readme.parent, Path(results_dir))
    return text, f"{head}{BEGIN}\n{body}\n{END}{tail}"


def _decode(level: dict) -> str:
    """A level's decode-wall ratio with its CI, or a dash where the record predates it."""
    if level.get("decode_median_ratio") is None:
        return "–"
    lo, hi = level["decode_ci95"]
    return f"{_num(level['decode_median_ratio'])} [{_num(lo)}, {_num(hi)}]"

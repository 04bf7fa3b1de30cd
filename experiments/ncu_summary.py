"""Summarise an Nsight Compute text report of ``h200_w12_ncu.py`` into a results record.

Reads the report (``ncu ... python3 experiments/h200_w12_ncu.py --cases A,B > report.txt``),
takes each profiled launch's duration, DRAM throughput, registers, grid, waves, occupancy, shared
memory, issue and eligibility, pairs launches with the case labels in the order the script printed
them, and writes a JSON of kind ``ncu`` with the environment fingerprint of a record from the same
machine start (``--fingerprint-from``, its commit replaced by ``--commit``)::

    python experiments/ncu_summary.py REPORT.txt --fingerprint-from RECORD.json --commit SHA \\
        --command "ncu ..." --note "..." --out results/NAME.json
"""

import argparse
import json
import re
from pathlib import Path

METRICS = {  # report line name -> record field
    "Duration": "duration_us",
    "DRAM Throughput": "dram_throughput_pct",
    "Registers Per Thread": "registers_per_thread",
    "Grid Size": "grid_size",
    "Waves Per SM": "waves_per_sm",
    "Achieved Occupancy": "achieved_occupancy_pct",
    "Dynamic Shared Memory Per Block": "dynamic_smem_per_block_kb",
    "Issued Warp Per Scheduler": "issued_warp_per_scheduler",
    "Eligible Warps Per Scheduler": "eligible_warps_per_scheduler",
    "L2 Hit Rate": "l2_hit_rate_pct",
    "Compute (SM) Throughput": "compute_sm_throughput_pct",
    "SM Frequency": "sm_frequency_ghz",
}
LAUNCH = re.compile(r"^  (\w+) \(\d+, \d+, \d+\)x\(\d+, \d+, \d+\)")
CASE = re.compile(r"^case (\d+): (\S+)")


def parse(text: str) -> list[dict]:
    """One dict per profiled launch, in report order, with the case label where printed."""
    labels = {int(m.group(1)): m.group(2) for m in map(CASE.match, text.splitlines()) if m}
    launches = []
    for line in text.splitlines():
        head = LAUNCH.match(line)
        if head:
            launches.append({"case": labels.get(len(launches)), "kernel": head.group(1)})
            continue
        if not launches:
            continue
        for name, field in METRICS.items():
            m = re.match(rf"^\s+{re.escape(name)}(?:\s+\S.*?)?\s+([\d,.]+)\s*$", line)
            if m and field not in launches[-1]:
                launches[-1][field] = float(m.group(1).replace(",", ""))
    return launches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report")
    parser.add_argument("--fingerprint-from", required=True)
    parser.add_argument("--commit", required=True)
    parser.add_argument("--command", required=True)
    parser.add_argument("--note", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    fp = {**json.loads(Path(args.fingerprint_from).read_text())["fingerprint"],
          "commit": args.commit}
    record = {"kind": "ncu", "fingerprint": fp, "command": args.command,
              "raw": Path(args.report).name, "cases": parse(Path(args.report).read_text()),
              "note": args.note}
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()

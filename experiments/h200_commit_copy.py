"""The Gated-DeltaNet snapshot commit's state copy at Qwen3.8-27B shapes, three ways side by side.

48 layers x B rows x 8 verify steps of [48, 128, 128] fp32 states: (a) one ``index_select`` per
layer (the engine before the layer-stacked state), (b) one ``index_select`` over the stack, (c) the
``stacked_select`` Triton kernel. Each is timed by CUDA-graph replays (``kernels.common.bench``),
the three interleaved round by round; the record has each round's median, the medians' median, and
the achieved TB/s for the bytes that must move (read + write of B x 48 states). Writes
$OUT/commit-copy.json.

    python3 experiments/h200_commit_copy.py [--rows 1,16,32] [--rounds 5]
"""

import argparse
import json
import os
import statistics
from pathlib import Path

import torch

OUT = Path(os.environ.get("OUT", "/tmp/out"))
LAYERS, STEPS, STATE = 48, 8, (48, 128, 128)


def main(argv=None) -> None:
    from specpilot import fingerprint

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1,16,32")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    record = {"kind": "commit_copy", "layers": LAYERS, "steps": STEPS, "state": STATE,
              "fingerprint": fingerprint.current("cuda").to_dict(), "rows": []}
    for rows in (int(r) for r in args.rows.split(",")):
        row = time_rows(rows, args.rounds)  # its tensors are freed when it returns
        torch.cuda.empty_cache()
        print(json.dumps({k: (v["median_us"] if isinstance(v, dict) else v) for k, v in row.items()}),
              flush=True)
        record["rows"].append(row)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "commit-copy.json").write_text(json.dumps(record, indent=1))


def time_rows(rows: int, num_rounds: int) -> dict:
    """The three ways at ``rows`` requests, checked, then timed in interleaved rounds."""
    from specpilot.kernels.common.bench import time_calls
    from specpilot.kernels.stacked_select.triton import select_rows_triton

    device = torch.device("cuda")
    snapshots = torch.randn(LAYERS, rows, STEPS, *STATE, device=device)
    recurrent = torch.empty(LAYERS, rows, *STATE, device=device)
    kept = torch.arange(rows, device=device) * STEPS + (torch.arange(rows, device=device) % STEPS)
    flat = snapshots.flatten(1, 2)
    per_layer = [(flat[i], recurrent[i]) for i in range(LAYERS)]

    def layerwise():
        for src, dst in per_layer:
            torch.index_select(src, 0, kept, out=dst)

    ways = {"index_select_per_layer": layerwise,
            "index_select_stacked": lambda: torch.index_select(flat, 1, kept, out=recurrent),
            "triton_stacked_select": lambda: select_rows_triton(flat, kept, recurrent)}
    expected = flat[:, kept].clone()
    for name, fn in ways.items():  # every way computes the same states before it is timed
        recurrent.zero_()
        fn()
        torch.cuda.synchronize()
        if not torch.equal(recurrent, expected):
            raise SystemExit(f"{name} copied wrong states at {rows} rows")
    moved = 2 * LAYERS * rows * recurrent[0, 0].numel() * 4
    rounds = {name: [] for name in ways}
    for _ in range(num_rounds):  # interleaved: every round times all three
        for name, fn in ways.items():
            rounds[name].append(time_calls([fn], device, reps=20).p50_us)
    row = {"rows": rows, "bytes_moved": moved}
    for name, samples in rounds.items():
        us = statistics.median(samples)
        row[name] = {"us_per_round": samples, "median_us": us, "tb_s": moved / us / 1e6}
    return row


if __name__ == "__main__":
    main()

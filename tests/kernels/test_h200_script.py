"""experiments/kernels_h200.py runs end to end (``--cpu-smoke``: tiny shapes, interpreter) and
writes the JSON the cost model reads. Speed numbers come only from the H200 run."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_h200_script_cpu_smoke(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1"}
    # --l2: the L2 prefetch variants join the sweeps (the interpreter then rejects them: PTX)
    proc = subprocess.run([sys.executable, "experiments/kernels_h200.py", "--cpu-smoke", "--l2",
                           "0,8"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "L2_PREFETCH variants added to the sweeps: 9\n" in proc.stdout
    report = json.loads((tmp_path / "kernels_h200.json").read_text())
    assert report["fingerprint"]["gpu"].startswith("cpu")
    assert all(c["ok"] for c in report["checks"])
    rows = report["rows"]
    assert [(r["shape"], r["M"]) for r in rows] == [
        (s, m) for s in ("tiny_a", "tiny_b") for m in (1, 3, 16)]
    for r in rows:
        assert r["cublas"]["ok"]
        for op in ("skinny_gemm", "w12_gemm", "w12f_gemm"):
            best = r[op]["best"]
            assert best is not None and best["roofline"]["bytes_moved"] > 0
            states = {t["state"] for t in r[op]["sweep"]}
            assert states <= {"ok", "wrong", "error", "error (earlier)"}
        assert r["w12_best_op"] in ("w12_gemm", "w12f_gemm")
    assert proc.stdout.strip().splitlines()[-1].startswith("tiny_b")  # the table is printed last


def test_gemm_probe_cpu_smoke(tmp_path):
    """experiments/h200_gemm_probe.py: every grid combination is validated, checked against the
    exact result and then timed, or recorded with why not (here BLOCK_T=16 cannot split M=3)."""
    env = {**os.environ, "OUT": str(tmp_path), "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "experiments/h200_gemm_probe.py", "--cpu-smoke",
                           "--op", "w12_gemm", "--m", "3,40", "--tiles", "16x1,32x2",
                           "--grid", "BLOCK_T=0,16", "--base",
                           "kernel=dot,DECODE=int,BLOCK_K=32,SPLIT_K=1,num_stages=2,ESC_CHUNK=1"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "h200_gemm_probe.json").read_text())
    rows = report["rows"]
    assert report["configs"] == 4 and len(rows) == 2 * 2 * 4  # shapes x M x configs
    for r in rows:  # every shape and tile: only BLOCK_T=16 at M=3 cannot run
        expected = "invalid" if (r["M"], r["config"]["BLOCK_T"]) == (3, 16) else "ok"
        assert r["state"] == expected, r
    assert all(r["p50_us"] > 0 for r in rows if r["state"] == "ok")
    assert {(b["shape"], b["M"]) for b in report["best"]} == {
        (s, m) for s in ("tiny_a", "tiny_b") for m in (3, 40)}


def test_gemm_probe_takes_the_fragment_order_op_without_tiles(tmp_path):
    """``--op w12f_gemm`` with no ``--tiles``: the tile is ``num_warps`` x ``ROWS_PER_WARP``, given
    as grid axes, and every combination runs and passes the check; a ``KxN`` shape is a shape."""
    env = {**os.environ, "OUT": str(tmp_path), "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "experiments/h200_gemm_probe.py", "--cpu-smoke",
                           "--op", "w12f_gemm", "--m", "5", "--tiles", "", "--shapes", "72x40",
                           "--grid", "num_warps=1,2", "--grid", "ROWS_PER_WARP=16,32", "--base",
                           "kernel=mma,DECODE=int,BLOCK_K=32,SPLIT_K=1,BLOCK_T=8,ESC_CHUNK=1,"
                           "MMA_V2=0,num_stages=1"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = json.loads((tmp_path / "h200_gemm_probe.json").read_text())["rows"]
    assert len(rows) == 4 and all(r["state"] == "ok" and r["p50_us"] > 0 for r in rows)
    assert {(r["shape"], r["K"], r["N"]) for r in rows} == {("72x40", 72, 40)}
    assert {(r["config"]["num_warps"], r["config"]["ROWS_PER_WARP"]) for r in rows} == {
        (1, 16), (1, 32), (2, 16), (2, 32)}


def test_tuner_vs_sweep_cpu_smoke(tmp_path):
    """experiments/h200_tuner_vs_sweep.py: the sweep's configs run first, then the search's
    (TPE's proposals and the tuner's random valid configs); the report tells them apart and
    compares their best."""
    env = {**os.environ, "OUT": str(tmp_path), "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1",
           "SPECPILOT_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "experiments/h200_tuner_vs_sweep.py", "--cpu-smoke",
                           "--rows", "skinny_gemm:tiny_a:3", "--extra-trials", "2"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [row] = json.loads((tmp_path / "h200_tuner_vs_sweep.json").read_text())["rows"]
    num_sweep, trials = row["num_sweep"], row["trials"]
    assert num_sweep > 0 and [t["source"] for t in trials[:num_sweep]] == ["sweep"] * num_sweep
    beyond = [t for t in trials[num_sweep:] if not t["repeat"]]
    assert len(beyond) == 2 and {t["source"] for t in beyond} <= {"tpe", "random"}
    assert row["best_sweep"]["p50_us"] == min(t["p50_us"] for t in trials[:num_sweep]
                                              if t["p50_us"])
    assert row["beyond_over_sweep"] == row["best_beyond"]["p50_us"] / row["best_sweep"]["p50_us"]


def test_kernel_agent_script_cpu_smoke(tmp_path):
    """experiments/h200_kernel_agent.py: a W12 champion's weights are surveyed on the W12 GEMM,
    the farthest from the ceiling is tuned, and every asked config was valid and checked."""
    env = {**os.environ, "OUT": str(tmp_path), "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1",
           "SPECPILOT_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "experiments/h200_kernel_agent.py", "--cpu-smoke",
                           "--trials", "2", "--rounds", "1", "--reps", "1", "--m", "3"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "h200_kernel_agent.json").read_text())
    assert {row["op"] for row in report["survey"]} == {"w12f_gemm"}
    worst = report["worst"]
    assert worst["fraction_of_ceiling"] == min(r["fraction_of_ceiling"] for r in report["survey"])
    [rnd] = report["rounds"]
    assert rnd["asked"] == 2 and rnd["counts"] == {"ok": 2}
    assert rnd["best"]["op"] == "w12f_gemm" and rnd["best"]["n"] == worst["n"]

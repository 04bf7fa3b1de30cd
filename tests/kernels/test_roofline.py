"""Roofline numbers and the CPU timer."""

import pytest
import torch

from specpilot.kernels.common.bench import Timing
from specpilot.kernels.common.bench import num_copies_for
from specpilot.kernels.common.bench import MAX_WARMUP_BATCH
from specpilot.kernels.common.bench import time_calls
from specpilot.kernels.common.bench import warm_up
from specpilot.kernels.common.roofline import ceiling_for
from specpilot.kernels.common.roofline import gemm_traffic
from specpilot.kernels.common.roofline import measure
from specpilot.kernels.common.roofline import place


def test_h200_gate_up_roofline():
    m, n, k = 16, 34816, 5120
    traffic = gemm_traffic(m, n, k, weight_bytes=2 * n * k)
    assert traffic.bytes_moved == 2 * n * k + 2 * m * k + 2 * m * n
    assert traffic.flops == 2 * m * n * k
    timing = Timing(95.0, 97.088, 99.0, reps=10, method="test")
    roof = place("skinny_gemm", m, n, k, traffic, timing, ceiling_for("NVIDIA H200"))
    assert roof.tb_s == pytest.approx(traffic.bytes_moved / 97.088e-6 / 1e12)
    assert roof.frac_read_ceiling == pytest.approx(roof.tb_s / 4.58)
    assert roof.bound == "memory"
    assert roof.floor_us == pytest.approx(traffic.bytes_moved / 4.58e12 * 1e6)
    assert 0.75 < roof.frac_read_ceiling < 0.85  # the measured cuBLAS anchor: 3.69 TB/s


def test_unknown_gpu_has_no_fractions():
    timing = Timing(1, 1, 1, 1, "t")
    roof = place("x", 1, 8, 8, gemm_traffic(1, 8, 8, 128), timing, ceiling_for("cpu"))
    assert roof.frac_read_ceiling is None and roof.bound == "unknown"


def test_cpu_timer_and_copies():
    calls = [lambda: torch.ones(64).sum() for _ in range(3)]
    t = time_calls(calls, torch.device("cpu"), reps=5)
    assert 0 < t.p20_us <= t.p50_us <= t.p80_us
    assert num_copies_for(2 * 248320 * 5120) == 3
    assert num_copies_for(2 * 5120 * 5120) == 4


def test_timer_repeats_calls_to_min_calls():
    counts = [0, 0, 0]

    def call(i):
        counts[i] += 1

    calls = [lambda i=i: call(i) for i in range(3)]
    time_calls(calls, torch.device("cpu"), reps=4, min_calls=7)
    # one warm-up pass, then per rep each call ceil(7 / 3) = 3 times
    assert counts == [1 + 4 * 3] * 3
    counts[:] = [0, 0, 0]
    time_calls(calls, torch.device("cpu"), reps=4, inner=5, min_calls=7)
    assert counts == [1 + 4 * 5] * 3  # inner above what min_calls asks for wins


def test_warm_up_replays_until_the_time_is_spent():
    batches = []

    def replay_ms(n):  # each replay takes 0.3 ms
        batches.append(n)
        return 0.3 * n

    assert warm_up(replay_ms, 5.0) == 31 and batches == [1, 2, 4, 8, 16]  # 9.3 ms >= 5 ms
    batches.clear()
    assert warm_up(replay_ms, 0.0) == 0 and batches == []  # no warm-up asked for
    batches.clear()
    # replays of no measurable time: the batches stop at MAX_WARMUP_BATCH, never loop forever
    total = warm_up(lambda n: batches.append(n) or 0.0, 5.0)
    assert batches[-1] == MAX_WARMUP_BATCH and total == 2 * MAX_WARMUP_BATCH - 1


def test_measure_a_call_on_cpu():
    x = torch.randn(2, 16).to(torch.bfloat16)
    copies = [torch.randn(8, 16).to(torch.bfloat16) for _ in range(3)]
    calls = [lambda w=w: x.float() @ w.float().T for w in copies]
    roof = measure("ref", 2, 8, 16, gemm_traffic(2, 8, 16, 2 * 8 * 16), calls, torch.device("cpu"),
                   reps=3)
    assert roof.bytes_moved == 2 * 8 * 16 + 2 * 2 * 16 + 2 * 2 * 8 and roof.tb_s > 0
    assert roof.frac_read_ceiling is None

"""Per-SKU ceilings. H200 values were measured here; the others are datasheet leads, marked so.

``launch_us`` is the fixed cost of one kernel inside a captured step (launch, ramp and tail of a
kernel that waits on the previous one): measured by the worker's ``measure`` job
(:func:`specpilot.costmodel.launches.measure_launch_us`), which the gap table prefers; None here
until a measurement is recorded (no datasheet states it).
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class Gpu:
    name: str
    read_tb_s: float  # streaming read bandwidth (the weight-read ceiling)
    bf16_tflop_s: float  # dense bf16 matrix rate
    source: str
    launch_us: float | None = None  # fixed cost per kernel in a CUDA graph (None: not measured)

    def time_ms(self, num_bytes: float, flops: float) -> float:
        """The roofline floor of one pass: the larger of the memory and the compute time."""
        return max(num_bytes / (self.read_tb_s * 1e12), flops / (self.bf16_tflop_s * 1e12)) * 1e3


GPUS = {
    "h200": Gpu("NVIDIA H200", 4.58, 770.0,
                "measured 2026-11-29: streaming read 4.58 TB/s, 8192^3 bf16 GEMM 769-798 TFLOP/s; "
                "launch_us not measured yet (the measure job reports it)"),
    "h100": Gpu("NVIDIA H100 80GB HBM3", 3.35, 989.0, "datasheet (not measured here)"),
    "rtxpro6000": Gpu("NVIDIA RTX PRO 6000 Blackwell", 1.79, 503.8,
                      "datasheet (not measured here)"),
    # CPU settings (CI, the embedded default) rank phases with these; no speed claim rests on them.
    "cpu": Gpu("CPU (nominal)", 0.02, 0.5, "nominal round numbers for orchestration on a CPU box"),
}

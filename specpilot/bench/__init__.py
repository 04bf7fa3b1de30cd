"""Benchmarks, A/B speed comparison, the results store and the README report (DESIGN.md §5, §9).

Modules: ``workload`` (prompts, sampling, replayed acceptance), ``runner`` (single-request
bench), ``batched`` (throughput and latency at each concurrency), ``compare`` (interleaved A/B),
``stats`` (paired ratios, bootstrap CI, stopping rule), ``remote`` (benchmark a running server
over HTTP), ``records`` / ``store`` / ``plots`` (what every run leaves behind) and ``report``
(README tables from ``experiments/results``). matplotlib, pyarrow and rich are imported only where
used.
"""

from specpilot.bench.batched import bench_level
from specpilot.bench.compare import compare_engines
from specpilot.bench.compare import compare_saved
from specpilot.bench.records import header
from specpilot.bench.records import publish
from specpilot.bench.records import validation_record
from specpilot.bench.runner import bench_engine
from specpilot.bench.stats import StoppingRule
from specpilot.bench.stats import bootstrap_ci
from specpilot.bench.stats import estimate_speedup
from specpilot.bench.workload import Workload
from specpilot.bench.workload import replay_for
from specpilot.bench.workload import workload_for

__all__ = [
    "StoppingRule",
    "Workload",
    "bench_engine",
    "bench_level",
    "bootstrap_ci",
    "compare_engines",
    "compare_saved",
    "estimate_speedup",
    "header",
    "publish",
    "replay_for",
    "validation_record",
    "workload_for",
]

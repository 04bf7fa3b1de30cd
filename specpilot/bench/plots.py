"""Plots written next to each stored record (matplotlib, Agg backend: no display needed)."""

from pathlib import Path

from specpilot.errors import NotBuiltError


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def tau_histogram(histogram: dict, path: Path, title: str) -> Path:
    """Bar chart of steps by accept length (bonus included); ``histogram``: {length: count}."""
    plt = _pyplot()
    lengths = sorted(int(k) for k in histogram)
    counts = [histogram[str(k)] if str(k) in histogram else histogram[k] for k in lengths]
    total = sum(counts)
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.bar(lengths, [c / total for c in counts], color="#4c72b0")
    mean = sum(k * c for k, c in zip(lengths, counts)) / total
    ax.axvline(mean, color="#c44e52", linestyle="--", label=f"tau = {mean:.2f}")
    ax.set_xlabel("tokens kept per step (accept length)")
    ax.set_ylabel("fraction of steps")
    ax.set_xticks(lengths)
    ax.set_title(title, fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def phase_bars(phases: dict, path: Path, title: str) -> Path:
    """Bars of time per step by phase; ``phases['ms_per_step']``: {phase: ms}."""
    if not phases.get("measured"):
        raise NotBuiltError(f"no per-phase times to plot: {phases.get('reason', 'not measured')}")
    plt = _pyplot()
    names, values = zip(*phases["ms_per_step"].items())
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.barh(names, values, color="#55a868")
    ax.set_xlabel("ms per decode step")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def speedup_ci(record: dict, path: Path, title: str) -> Path:
    """Every paired ratio, the median speedup and its 95% CI band; 1.0 marks parity."""
    plt = _pyplot()
    ratios = record["ratios"]
    lo, hi = record["ci95"]
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    ax.axhspan(lo, hi, color="#4c72b0", alpha=0.2, label=f"95% CI [{lo:.3f}, {hi:.3f}]")
    ax.plot(range(len(ratios)), ratios, "o", color="#4c72b0", markersize=4, label="pair ratio")
    ax.axhline(record["median_speedup"], color="#4c72b0",
               label=f"median {record['median_speedup']:.3f}")
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle=":")
    ax.set_xlabel("pair (in run order)")
    ax.set_ylabel("A time / B time  (> 1: B faster)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def concurrency_sweep(levels: list[dict], path: Path, title: str) -> Path:
    """Output tok/s and median request latency against concurrency (``--scenario cN``)."""
    plt = _pyplot()
    concurrency = [level["concurrency"] for level in levels]
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(concurrency, [level["output_tok_s"] for level in levels], "o-", color="#4c72b0")
    ax.set_xlabel("concurrency (requests in flight)")
    ax.set_ylabel("output tok/s", color="#4c72b0")
    ax.set_xscale("log", base=2)
    latency = ax.twinx()
    latency.plot(concurrency, [level["request_latency_s"]["median"] for level in levels], "s--",
                 color="#c44e52")
    latency.set_ylabel("median request latency (s)", color="#c44e52")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plots_for(record: dict, out_dir: Path) -> list[Path]:
    """Write the plots that fit ``record``'s kind into ``out_dir``; returns their paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    title = " ".join(str(record.get(k) or "") for k in ("setting", "engine", "acceptance"))
    written = []
    if record["kind"] == "bench":
        summary = record["summary"]
        if summary.get("tau_histogram"):
            written.append(tau_histogram(summary["tau_histogram"], out_dir / "tau_histogram.png",
                                         title))
        if summary.get("phases", {}).get("measured"):
            written.append(phase_bars(summary["phases"], out_dir / "phases.png", title))
        if len(record.get("levels", [])) > 1:
            written.append(concurrency_sweep(record["levels"], out_dir / "concurrency.png", title))
    elif record["kind"] == "compare":
        sides = f"A={record['a']['engine']} B={record['b']['engine']}"
        written.append(speedup_ci(record, out_dir / "speedup.png",
                                  f"{record.get('setting')} {sides}"))
    return written

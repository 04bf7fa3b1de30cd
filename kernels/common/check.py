"""The correctness gate every kernel result passes before it is timed (STYLE.md items 13-14).

One tolerance, derived from the arithmetic rather than tuned: a GEMM output rounded to
``out_dtype`` may differ from the exact (fp64) result by one unit in the last place of that dtype
(rounding, plus a tie broken the other way) plus the fp32 accumulation error, bounded here by
``2^-16 * sum|x*w|`` (fp32 summation over K <= 65536 terms in any order stays well inside it). A
missing K tile, a wrong row or a dropped W12 escape moves some output far outside this bound.
"""

import dataclasses

import torch

_REL_ULP = {torch.bfloat16: 2.0**-7, torch.float16: 2.0**-10, torch.float32: 2.0**-22}
ACC_REL = 2.0**-16


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """Outcome of :func:`check_close`: ``ok``, the worst error and how many elements failed."""

    name: str
    ok: bool
    max_abs_err: float
    max_err_over_tol: float
    num_bad: int
    rmse_ratio: float

    def __str__(self) -> str:
        verdict = "ok" if self.ok else "FAIL"
        return (f"{self.name}: {verdict} max_abs_err={self.max_abs_err:.3g} "
                f"err/tol={self.max_err_over_tol:.3g} bad={self.num_bad} "
                f"rmse_ratio={self.rmse_ratio:.3g}")


def gemm_exact(x: torch.Tensor, w: torch.Tensor,
               chunk: int = 16384) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x @ w^T, |x| @ |w|^T)`` in fp64 for ``x [M, K]``, ``w [N, K]``: result, error scale.

    Chunked over N, so an lm_head needs ~0.7 GB of fp64 scratch, not 10 GB.
    """
    xd = x.double()
    outs, sums = [], []
    for n0 in range(0, w.shape[0], chunk):
        wd = w[n0:n0 + chunk].double()
        outs.append(xd @ wd.T)
        sums.append(xd.abs() @ wd.abs().T)
    if not outs:
        empty = xd.new_zeros((x.shape[0], 0))
        return empty, empty
    return torch.cat(outs, 1), torch.cat(sums, 1)


def check_close(name: str, out: torch.Tensor, exact: torch.Tensor,
                abs_sum: torch.Tensor) -> CheckResult:
    """Check ``out`` (any float dtype) against the fp64 ``exact`` result with scale ``abs_sum``.

    Non-finite entries must match exactly (same NaN positions, same infinities).
    """
    if out.shape != exact.shape:
        return CheckResult(name, False, float("inf"), float("inf"), exact.numel(), float("inf"))
    e = exact.double()
    o, s = out.to(e.device, torch.float64), abs_sum.to(e.device, torch.float64)
    finite = torch.isfinite(e)
    nonfinite_ok = bool(torch.equal(torch.isnan(o), torch.isnan(e))) and bool(
        torch.equal(o[torch.isinf(e)], e[torch.isinf(e)]))
    rel = _REL_ULP.get(out.dtype, 2.0**-7)
    tol = rel * e.abs() + ACC_REL * s + torch.finfo(torch.float32).tiny
    err = torch.where(finite, (o - e).abs(), torch.zeros_like(e))
    err = torch.where(finite & ~torch.isfinite(o), torch.full_like(e, float("inf")), err)
    bad = err > tol
    num_bad = int(bad.sum())
    ratio = float((err / tol).max()) if err.numel() else 0.0
    denom = float(e[finite].norm()) if finite.any() else 0.0
    rmse = float(err.norm()) / denom if denom > 0 else float(err.norm())
    max_err = float(err.max()) if err.numel() else 0.0
    return CheckResult(name, num_bad == 0 and nonfinite_ok, max_err, ratio, num_bad, rmse)


def assert_gemm_close(name: str, out: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> None:
    """Assert ``out [M, N]`` equals ``x [M, K] @ w [N, K]^T`` within the tolerance above."""
    exact, abs_sum = gemm_exact(x, w)
    result = check_close(name, out, exact, abs_sum)
    assert result.ok, str(result)

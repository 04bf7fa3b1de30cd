"""Pure-torch reference of the W12 GEMM on fragment-order planes: the rows-order reference's
math (unpack, then an fp32-accumulated GEMM); unpacking undoes the plane order."""

from specpilot.kernels.w12_gemm.reference import w12_gemm_ref as w12f_gemm_ref

__all__ = ["w12f_gemm_ref"]

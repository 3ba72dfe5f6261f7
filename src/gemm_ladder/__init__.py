"""gemm-ladder: nine Hopper GEMM kernels from one correct tile to a cluster-multicast,
multi-consumer kernel, the gates that prove each one, and a TMA pipeline designer and auditor; and on
top of them a library: :func:`mm`, :func:`linear` and :func:`explain` (:mod:`gemm_ladder.api`).

The ladder's contract: ``c = a @ b.T`` with ``a`` (M, K) and ``b`` (N, K) row-major, bf16 or fp16
(see :mod:`gemm_ladder.contract`).
"""

__version__ = "0.1.0"

from gemm_ladder.api import Explanation, explain, linear, mm  # noqa: E402

__all__ = ["Explanation", "__version__", "explain", "linear", "mm"]

"""gemm-ladder: nine Hopper GEMM kernels from one correct tile to a cluster-multicast,
multi-consumer kernel, the gates that prove each one, and a TMA pipeline designer and auditor.

``c = a @ b.T`` with ``a`` (M, K) and ``b`` (N, K) row-major, bf16 or fp16 (see :mod:`gemm_ladder.contract`).
"""

__version__ = "0.1.0"

"""gemm-ladder: nine Hopper GEMM kernels from one correct tile to a cluster-multicast,
multi-consumer kernel, the gates that prove each one, and a TMA pipeline designer and auditor; and on
top of them a library: :func:`mm`, :func:`linear`, :func:`swiglu` and :func:`explain` (:mod:`gemm_ladder.api`).

The ladder's contract: ``c = a @ b.T`` with ``a`` (M, K) and ``b`` (N, K) row-major, bf16 or fp16
(see :mod:`gemm_ladder.contract`).
"""

__version__ = "0.1.0"

__all__ = ["Explanation", "__version__", "explain", "linear", "mm", "swiglu"]

_API = ("Explanation", "explain", "linear", "mm", "swiglu")


def __getattr__(name: str):
    # The API is imported on first use: ``import gemm_ladder.design`` (pure Python) stays light.
    if name in _API:
        from gemm_ladder import api

        return getattr(api, name)
    raise AttributeError(f"module 'gemm_ladder' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))

"""Time each kernel in ``kernels`` against the obvious CuPy composition.

Run as ``python benchmarks/bench_kernels.py [--repeat N]``. Each case is warmed up,
then timed with CUDA events around every launch; the table shows the median.
Memory-bound kernels report achieved GB/s (bytes read once plus bytes written once),
attention and weighted_sum report TFLOP/s (causal attention counts only the
unmasked half). Exits 0 with a message where no CuPy or no GPU is present.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: find kernels/

import kernels

WARMUP = 3
REPEAT = 20


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    """One benchmark: our kernel and the CuPy composition on the same inputs."""

    kernel: str
    dtype: str
    shape: str
    ours: Callable[[], Any]
    baseline: Callable[[], Any]
    bytes_moved: float = 0.0
    flops: float = 0.0


def find_gpu_problem() -> str | None:
    """Why nothing can be timed here, or None."""
    try:
        import cupy
    except ImportError:
        return "CuPy is not installed"
    try:
        if cupy.cuda.runtime.getDeviceCount() == 0:
            return "no CUDA GPU: cudaGetDeviceCount() returned 0"
    except Exception as exc:  # CUDARuntimeError, or a missing driver library
        return f"no CUDA GPU: {exc}"
    return None


def time_ms(cp: ModuleType, fn: Callable[[], Any], repeat: int) -> float:
    """Median milliseconds of ``fn`` on the current stream, after warm-up."""
    for _ in range(WARMUP):
        fn()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(repeat):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end))
    return statistics.median(times)


def softmax_cases(cp: ModuleType) -> list[Case]:
    """Row softmax vs exp(x - max) / sum."""

    def composed(x: Any) -> Any:
        e = cp.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    cases = []
    for dtype in ("float16", "float32"):
        for shape in ((8192, 1024), (4096, 4096), (1024, 32768)):
            x = cp.random.standard_normal(shape, dtype=cp.float32).astype(dtype)
            cases.append(
                Case(
                    kernel="softmax",
                    dtype=dtype,
                    shape="x".join(map(str, shape)),
                    ours=lambda x=x: kernels.softmax(x),
                    baseline=lambda x=x: composed(x),
                    bytes_moved=2 * x.nbytes,
                )
            )
    return cases


def layer_norm_cases(cp: ModuleType) -> list[Case]:
    """layer_norm vs (x - mean) / sqrt(var + eps) * w + b."""

    def composed(x: Any, w: Any, b: Any) -> Any:
        mean = x.mean(axis=-1, keepdims=True)
        var = x.var(axis=-1, keepdims=True)
        return (x - mean) / cp.sqrt(var + 1e-5) * w + b

    cases = []
    for dtype in ("float16", "float32"):
        for shape in ((8192, 1024), (4096, 4096)):
            x = cp.random.standard_normal(shape, dtype=cp.float32).astype(dtype)
            w = cp.ones(shape[-1], dtype=dtype)
            b = cp.zeros(shape[-1], dtype=dtype)
            cases.append(
                Case(
                    kernel="layer_norm",
                    dtype=dtype,
                    shape="x".join(map(str, shape)),
                    ours=lambda x=x, w=w, b=b: kernels.layer_norm(x, w, b),
                    baseline=lambda x=x, w=w, b=b: composed(x, w, b),
                    bytes_moved=2 * x.nbytes,
                )
            )
    return cases


def weighted_sum_cases(cp: ModuleType) -> list[Case]:
    """weighted_sum vs cupy.matmul (cuBLAS)."""
    cases = []
    for dtype in ("float16", "float32"):
        batch, heads, seq, dim = 4, 16, 1024, 64
        w = cp.random.random((batch, heads, seq, seq), dtype=cp.float32).astype(dtype)
        v = cp.random.standard_normal((batch, heads, seq, dim), dtype=cp.float32).astype(dtype)
        cases.append(
            Case(
                kernel="weighted_sum",
                dtype=dtype,
                shape=f"{batch}x{heads}x{seq}x{seq} @ x{dim}",
                ours=lambda w=w, v=v: kernels.weighted_sum(w, v),
                baseline=lambda w=w, v=v: cp.matmul(w, v),
                flops=2.0 * batch * heads * seq * seq * dim,
            )
        )
    return cases


def attention_cases(cp: ModuleType) -> list[Case]:
    """Fused attention vs softmax(q @ k^T * scale) @ v in CuPy (cuBLAS matmuls)."""

    def composed(q: Any, k: Any, v: Any, mask: Any) -> Any:
        s = (q @ k.swapaxes(-1, -2)) * (1.0 / q.shape[-1] ** 0.5)
        if mask is not None:
            s = cp.where(mask, s, cp.asarray(-cp.inf, dtype=s.dtype))
        e = cp.exp(s - s.max(axis=-1, keepdims=True))
        return (e / e.sum(axis=-1, keepdims=True)) @ v

    cases = []
    heads, dim = 16, 64
    for seq, batch in ((1024, 4), (2048, 4), (4096, 2)):
        mask = cp.tril(cp.ones((seq, seq), dtype=cp.bool_))
        for dtype in ("float16", "float32"):
            shape = (batch, heads, seq, dim)
            q, k, v = (
                cp.random.standard_normal(shape, dtype=cp.float32).astype(dtype) for _ in range(3)
            )
            for causal in (False, True):
                flops = 4.0 * batch * heads * seq * seq * dim * (0.5 if causal else 1.0)
                cases.append(
                    Case(
                        kernel="attention" + (" causal" if causal else ""),
                        dtype=dtype,
                        shape="x".join(map(str, shape)),
                        ours=lambda q=q, k=k, v=v, c=causal: kernels.attention(q, k, v, causal=c),
                        baseline=lambda q=q, k=k, v=v, m=(mask if causal else None): composed(
                            q, k, v, m
                        ),
                        flops=flops,
                    )
                )
    return cases


def main(argv: list[str] | None = None) -> int:
    """Print the benchmark table; 0 also where there is no GPU to time."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=REPEAT, help="timed runs per case")
    parser.add_argument(
        "--only", default="", help="comma-separated kernels to time (softmax, attention, ...)"
    )
    args = parser.parse_args(argv)
    problem = find_gpu_problem()
    if problem is not None:
        print(f"bench_kernels: skipped: {problem}")
        return 0
    import cupy as cp

    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.runtime.getDevice())
    print(
        f"device: {props['name'].decode()}, CuPy {cp.__version__}, "
        f"CUDA runtime {cp.cuda.runtime.runtimeGetVersion()}; median of {args.repeat} runs"
    )
    builders = {
        "softmax": softmax_cases,
        "layer_norm": layer_norm_cases,
        "weighted_sum": weighted_sum_cases,
        "attention": attention_cases,
    }
    wanted = [w for w in args.only.split(",") if w] or list(builders)
    header = f"{'kernel':<18} {'dtype':<8} {'shape':<24} {'ours ms':>9} {'cupy ms':>9} "
    header += f"{'speedup':>8} {'ours':>14} {'cupy':>14}"
    print(header)
    print("-" * len(header))
    for name in wanted:
        for case in builders[name](cp):
            ours = time_ms(cp, case.ours, args.repeat)
            base = time_ms(cp, case.baseline, args.repeat)
            if case.flops:
                rate = (
                    f"{case.flops / ours / 1e9:9.1f} TF/s",
                    f"{case.flops / base / 1e9:9.1f} TF/s",
                )
            else:
                rate = (
                    f"{case.bytes_moved / ours / 1e6:9.0f} GB/s",
                    f"{case.bytes_moved / base / 1e6:9.0f} GB/s",
                )
            print(
                f"{case.kernel:<18} {case.dtype:<8} {case.shape:<24} {ours:9.3f} {base:9.3f} "
                f"{base / ours:7.2f}x {rate[0]:>14} {rate[1]:>14}",
                flush=True,
            )
        cp.get_default_memory_pool().free_all_blocks()  # the next kernel's cases start clean
    return 0


if __name__ == "__main__":
    sys.exit(main())

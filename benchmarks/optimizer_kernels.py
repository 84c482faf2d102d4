"""Optimizer step time: the pservers' kernels (``pserver/optimizers.py``, also what a trainer's
own dense update runs) against ``torch.optim`` on the same values, in one process.

    python benchmarks/optimizer_kernels.py [--values 429201] [--rows 12000] [--quick] [--json F]

Dense: one parameter of ``--values`` float32 values (the CTR-DNN's 400x3 tower has 429,201),
stepped by the pserver's Adam and by ``torch.optim.Adam`` (``foreach=False``, the single-tensor
path, and ``foreach=True``). Sparse: ``--rows`` rows of width 10, the pserver's lazy Adam on
gathered rows (one step, per-row counts) against ``torch.optim.SparseAdam`` over a table of the
same rows. Each is timed ``--repeat`` times, interleaved; medians, and ratios pserver / torch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from elasticps.pserver.optimizers import OptimizerConfig, make_optimizer  # noqa: E402

ADAM = OptimizerConfig(kind="ADAM", lr=1e-3)


def per_step(run: Callable[[], None], steps: int) -> float:
    """Milliseconds per call of ``run``."""
    start = time.perf_counter()
    for _ in range(steps):
        run()
    return (time.perf_counter() - start) / steps * 1000


def pserver_dense(values: int) -> Callable[[], None]:
    opt = make_optimizer(ADAM)
    rng = np.random.default_rng(0)
    state = {"param": rng.random(values, dtype=np.float32), "step": 0,
             "slots": {name: np.zeros(values, np.float32) for name in opt.slots}}
    grad = rng.standard_normal(values).astype(np.float32)

    def run() -> None:
        state["step"] += 1
        state["param"], state["slots"] = opt.step(state["param"], grad, state["slots"],
                                                  np.array([state["step"]]))
    return run


def torch_dense(values: int, foreach: bool) -> Callable[[], None]:
    param = torch.nn.Parameter(torch.rand(values))
    param.grad = torch.randn(values)
    opt = torch.optim.Adam([param], lr=1e-3, foreach=foreach)
    return opt.step  # type: ignore[return-value]


def pserver_sparse(rows: int) -> Callable[[], None]:
    opt = make_optimizer(ADAM)
    rng = np.random.default_rng(0)
    values = rng.random((rows, 10), dtype=np.float32)
    slots = {name: np.zeros((rows, 10), np.float32) for name in opt.slots}
    grad = rng.standard_normal((rows, 10)).astype(np.float32)
    steps = np.ones((rows, 1), np.int64)

    def run() -> None:
        opt.step(values, grad, slots, steps)
    return run


def torch_sparse(rows: int) -> Callable[[], None]:
    table = torch.nn.Parameter(torch.rand(rows, 10))
    index = torch.arange(rows)
    table.grad = torch.sparse_coo_tensor(index[None], torch.randn(rows, 10), (rows, 10),
                                         check_invariants=True)
    opt = torch.optim.SparseAdam([table], lr=1e-3)
    return opt.step  # type: ignore[return-value]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--values", type=int, default=429_201)
    parser.add_argument("--rows", type=int, default=12_000)
    parser.add_argument("--steps", type=int, default=50, help="steps per timing")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="10 steps, 2 repeats")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.repeat = 10, 2
    torch.set_num_threads(1)  # a pserver is single-threaded numpy: compare like with like
    cases = {
        "pserver_dense_adam": pserver_dense(args.values),
        "torch_adam_single_tensor": torch_dense(args.values, foreach=False),
        "torch_adam_foreach": torch_dense(args.values, foreach=True),
        "pserver_sparse_adam": pserver_sparse(args.rows),
        "torch_sparse_adam": torch_sparse(args.rows),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.repeat):
        for name, run in cases.items():
            times[name].append(per_step(run, args.steps))
    ms = {name: round(statistics.median(t), 3) for name, t in times.items()}
    result = {
        "ms_per_step": ms,
        "dense_vs_torch_single_tensor": round(ms["pserver_dense_adam"]
                                              / ms["torch_adam_single_tensor"], 3),
        "dense_vs_torch_foreach": round(ms["pserver_dense_adam"] / ms["torch_adam_foreach"], 3),
        "sparse_vs_torch": round(ms["pserver_sparse_adam"] / ms["torch_sparse_adam"], 3),
        "values": args.values, "rows": args.rows, "steps": args.steps, "repeat": args.repeat,
    }
    for name, value in ms.items():
        print(f"{name}: {value:.3f} ms/step")
    print(f"pserver / torch: dense Adam {result['dense_vs_torch_single_tensor']:.2f}x "
          f"(single-tensor), {result['dense_vs_torch_foreach']:.2f}x (foreach); sparse Adam "
          f"{result['sparse_vs_torch']:.2f}x (medians of {args.repeat}, 1 thread)")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

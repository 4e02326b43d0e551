"""Chapter 20's GPU measurements, as a script for a machine with a CUDA GPU.

Builds the CUDA softmax ops through helpers.kernels (the same build as the
notebook's), runs the correctness suite and the input checks, times
torch.softmax, the naive and the fast kernel and ``y.copy_(x)`` on several
shapes, and writes ``softmax_gpu.md`` (tables) and ``softmax_gpu.json`` to
the output folder.

Usage, from the course root::

    .venv/bin/python benchmarks/softmax_gpu.py OUT_DIR      # or set $OUT
    .venv/bin/python benchmarks/softmax_gpu.py --dry-run    # no GPU needed: checks the script and the CPU op

Exit status: 0 when every check passes (on a GPU: both kernels pass the
correctness suite and refuse bad input, and the fast kernel beats the naive
one on 4096 x 4096; its ratio to torch.softmax is recorded, not required),
1 otherwise. The dry run also runs the suite on the deliberately broken
kernels of ``suite.BROKEN_KERNELS`` and requires it to fail each of them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere without installing helpers

import torch  # noqa: E402

from helpers import kernels  # noqa: E402
from helpers.kernels import suite  # noqa: E402

HEADLINE = (4096, 4096)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", nargs="?", default=os.environ.get("OUT"), help="output folder (default: $OUT, else build/softmax_gpu)")
    p.add_argument("--dry-run", action="store_true", help="no GPU: check the CPU op on the same cases and write a stub report")
    p.add_argument("--min-run-time", type=float, default=0.3, help="seconds of timed runs per measurement")
    args = p.parse_args(argv)
    if args.out is None:
        from helpers.paths import build_dir

        args.out = str(build_dir() / "softmax_gpu")
    return args


def environment() -> dict:
    info = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
            "arch_list": kernels.cuda_arch_list(), "date": time.strftime("%Y-%m-%d")}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
        info["capability"] = ".".join(map(str, torch.cuda.get_device_capability()))
    return info


def _table(rows: list[dict], keys: list[str]) -> str:
    lines = ["| " + " | ".join(keys) + " |", "|" + " --- |" * len(keys)]
    lines += ["| " + " | ".join(f"{r[k]:.1e}" if isinstance(r[k], float) else str(r[k]) for k in keys) + " |" for r in rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result: dict = {"environment": environment(), "dry_run": args.dry_run}
    md = [f"# Softmax kernels ({'dry run, CPU op only' if args.dry_run else result['environment'].get('gpu', 'GPU')})", ""]
    md.append("Environment: " + ", ".join(f"{k} {v}" for k, v in result["environment"].items()))
    ok = True

    if args.dry_run:
        ops = kernels.load_cpu_ops()
        checks = suite.correctness(ops.softmax_cpu, "cpu")
        rejections = suite.check_rejections(ops.softmax_cpu, "cpu")
        result["correctness"] = {"softmax_cpu": checks}
        result["rejections"] = {"softmax_cpu": rejections}
        md += ["", "## Correctness: softmax_cpu (dry run)", "", _table(checks, ["case", "shape", "max_rel_diff", "worst_row_sum_err", "tol_used", "ok"])]
        md += ["", "## Rejected inputs: softmax_cpu", "", _table(rejections, ["input", "message", "ok"])]
        caught = {name: [r["case"] for r in suite.correctness(fn, "cpu") if not r["ok"]] for name, fn in suite.BROKEN_KERNELS.items()}
        result["negative_controls"] = caught
        md += ["", "## Negative controls (the suite must fail each)", ""]
        md += [f"- {name}: {len(cases)} failing cases{' (NOT CAUGHT)' if not cases else ''}" for name, cases in caught.items()]
        md += ["", f"Benchmark shapes (not run): {', '.join(f'{r}x{c}' for r, c in suite.BENCH_SHAPES)}"]
        ok = all(r["ok"] for r in checks + rejections) and all(caught.values())
    else:
        if not torch.cuda.is_available():
            print("no CUDA device: run on a machine with a GPU, or use --dry-run", file=sys.stderr)
            return 1
        ops = kernels.load_cuda_ops()
        result["correctness"], result["rejections"] = {}, {}
        for name in ("softmax_naive", "softmax_fast"):
            fn = getattr(ops, name)
            checks = suite.correctness(fn, "cuda", max_cols=suite.NAIVE_MAX_COLS if name == "softmax_naive" else None)
            rejections = suite.check_rejections(fn, "cuda")
            result["correctness"][name], result["rejections"][name] = checks, rejections
            md += ["", f"## Correctness: {name}", "", _table(checks, ["case", "shape", "max_rel_diff", "worst_row_sum_err", "tol_used", "ok"])]
            md += ["", f"## Rejected inputs: {name}", "", _table(rejections, ["input", "message", "ok"])]
            ok = ok and all(r["ok"] for r in checks + rejections)
        bench = suite.benchmark(
            {"torch.softmax": lambda x: torch.softmax(x, -1), "naive": ops.softmax_naive, "fast": ops.softmax_fast},
            device="cuda", min_run_time=args.min_run_time,
        )
        result["benchmark"] = bench
        md += ["", "## Throughput (float32; GB/s = 2 x bytes of the input / time)", "", suite.markdown_table(bench)]
        head = {r["op"]: r for r in bench if tuple(r["shape"]) == HEADLINE}
        ratio = head["fast"]["gbps"] / head["torch.softmax"]["gbps"]
        vs_naive = head["fast"]["gbps"] / head["naive"]["gbps"]
        result["headline"] = {"shape": list(HEADLINE), "fast_over_torch": ratio, "fast_over_naive": vs_naive,
                              "fast_gbps": head["fast"]["gbps"], "copy_gbps": head["copy (y.copy_(x))"]["gbps"]}
        md += ["", f"On {HEADLINE[0]}x{HEADLINE[1]}: fast = {ratio:.2f}x torch.softmax's speed (recorded), {vs_naive:.1f}x the naive"
               f" kernel's (required: > 1), {head['fast']['of_copy']:.0%} of copy bandwidth."]
        ok = ok and vs_naive > 1

    result["ok"] = ok
    (out / "softmax_gpu.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (out / "softmax_gpu.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    print("\n".join(md))
    print(f"\n{'all checks passed' if ok else 'SOME CHECKS FAILED'}; wrote {out / 'softmax_gpu.md'} and softmax_gpu.json")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

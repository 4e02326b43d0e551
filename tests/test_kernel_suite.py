"""helpers.kernels.suite: the CUDA correctness suite passes correct kernels and fails broken ones.

CI has no GPU, so the suite's logic runs on CPU "kernels": ``torch.softmax``, the course's C++ op,
a float32 softmax with the worst summation order (a left-to-right sum, like the naive CUDA kernel),
and the deliberately broken kernels of ``suite.BROKEN_KERNELS``. The suite takes the op and the
device as parameters, so what passes and fails here is what it does on a GPU.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
import torch

from helpers import kernels
from helpers.kernels import suite

has_compiler = kernels.shutil.which(os.environ.get("CXX", "c++")) is not None


def sequential_float32(x: torch.Tensor) -> torch.Tensor:
    """A correct float32 softmax whose row sum runs left to right in float32 (numpy's cumsum), the
    summation order of the naive one-thread-per-row kernel and the least accurate one."""
    a = x.numpy()
    with np.errstate(all="ignore"):
        e = np.exp(a - a.max(axis=1, keepdims=True)).astype(np.float32)
        d = np.cumsum(e, axis=1, dtype=np.float32)[:, -1:]
        return torch.from_numpy((e / d).astype(np.float32))


def _failing(fn) -> dict[str, list[int]]:
    return {r["case"]: r["shape"] for r in suite.correctness(fn, "cpu") if not r["ok"]}


CORRECT = {"torch.softmax": lambda x: torch.softmax(x, dim=-1), "float32, left-to-right sum": sequential_float32}


@pytest.mark.parametrize("name", list(CORRECT))
def test_suite_passes_correct_kernels(name):
    results = suite.correctness(CORRECT[name], "cpu")
    assert len(results) == len(suite.correctness_cases()), "every case runs"
    bad = [(r["case"], r["tol_used"]) for r in results if not r["ok"]]
    assert not bad, f"{name} is correct but the suite fails it: {bad}"
    # not merely inside the tolerance: a correct float32 kernel uses well under half of it
    assert max(r["tol_used"] for r in results) < 0.5, max(results, key=lambda r: r["tol_used"])


@pytest.mark.skipif(not has_compiler, reason="needs a C++ compiler")
def test_suite_passes_the_cpp_op_and_its_rejections():
    assert not _failing(kernels.softmax_cpu)
    refused = suite.check_rejections(kernels.softmax_cpu, "cpu")
    assert all(r["ok"] for r in refused), refused


def test_suite_fails_the_lost_partial_sum_exactly_on_rows_longer_than_a_block():
    failing = _failing(suite.lost_partial_sum)
    assert "one very long row (1, 1000000)" in failing
    assert "width 4097 (block of 512 per row, scalar)" in failing, "one element left out of 4097 must show"
    assert all(shape[1] > 4096 for shape in failing.values()), f"rows of <= 4096 are computed right: {failing}"


def test_suite_fails_the_stale_max():
    failing = _failing(suite.stale_max)
    assert "block per row, float4 (64, 4096)" in failing
    assert all(shape[1] > 1024 for shape in failing.values()), f"rows of one chunk are computed right: {failing}"


def test_suite_fails_a_kernel_off_by_1e_5_on_the_block_path():
    failing = _failing(suite.slightly_off)
    widths = {shape[1] for shape in failing.values()}
    assert {1025, 1028, 4096}.issubset(widths), f"off by 1e-5 must fail just past the warp path and at 4096: {sorted(widths)}"
    assert min(widths) >= 1025
    # The limit of any float32 test: on very long rows round-off alone reaches 1e-5, and the tolerance follows it.
    assert suite.row_sum_tolerance(1_000_000) > 1e-5 > suite.row_sum_tolerance(4096)


def test_the_old_absolute_check_misses_the_lost_partial_sum_and_the_new_one_does_not():
    x = suite.correctness_cases()["one very long row (1, 1000000)"]
    y = suite.lost_partial_sum(x)
    old_diff = (y - torch.softmax(x, dim=-1)).abs().max().item()
    assert old_diff <= 1e-6, "the old check (absolute 1e-6) passed it: every value of that row is about 1e-6"
    verdict = suite.compare(y, x)
    assert not verdict["ok"] and verdict["worst_row_sum_err"] > 4 * verdict["sum_tol"], verdict


def test_a_nan_in_the_wrong_place_fails():
    x = torch.randn(4, 64)
    y = torch.softmax(x, dim=-1)
    y[1, 3] = float("nan")
    assert not suite.compare(y, x)["ok"]
    x[2] = -float("inf")  # an all -inf row: NaN is the right answer there
    assert suite.compare(torch.softmax(x, dim=-1), x)["ok"]
    assert not suite.compare(torch.nan_to_num(torch.softmax(x, dim=-1)), x)["ok"], "zeros where torch gives NaN"


def test_nan_and_plus_inf_cases_give_nan_rows_like_torch_and_the_cpp_op_matches():
    cases = suite.correctness_cases()
    nan_case, inf_case = cases["NaN in a block-path row (3, 4099)"], cases["+inf entry (4, 2000): NaN row, like torch"]
    assert torch.isnan(torch.softmax(nan_case, -1)).all(-1).tolist() == [False, True, False]
    # torch.softmax of a row holding +inf is NaN (inf - max = inf - inf), also with a -inf beside it.
    assert torch.isnan(torch.softmax(inf_case, -1)).all(-1).tolist() == [False, True, False, True]
    assert not suite.compare(torch.nan_to_num(torch.softmax(inf_case, -1)), inf_case)["ok"], "zeros where torch gives NaN"
    one_hot = torch.where(torch.isinf(inf_case) & (inf_case > 0), 1.0, 0.0)  # what a kernel that "handles" +inf might return
    assert not suite.compare(torch.where(torch.isnan(torch.softmax(inf_case, -1)), one_hot, torch.softmax(inf_case, -1)), inf_case)["ok"]
    if has_compiler:
        for x in (nan_case, inf_case):
            assert suite.compare(kernels.softmax_cpu(x), x)["ok"]


def test_switch_point_widths_cover_both_sides_and_both_load_paths_and_are_seeded():
    widths = suite.switch_point_widths(seed=0)
    for s in suite.SWITCH_POINTS:
        assert {s, s + 1} <= set(widths)
        assert suite.fast_kernel_path(s) != suite.fast_kernel_path(s + 1), f"{s} is not a switch point"
        near = [w for w in widths if abs(w - s) <= 64]
        assert {w % 4 == 0 for w in near if w <= s} == {True, False} == {w % 4 == 0 for w in near if w > s}
    assert widths == suite.switch_point_widths(seed=0)
    assert widths != suite.switch_point_widths(seed=1), "the random widths come from the seed"


def test_switch_points_are_the_ones_in_the_cuda_source():
    src = kernels.source("softmax_cuda.cu")
    fast = src[src.index("launch_softmax_fast("):]
    warp_max = int(re.search(r"kWarpRowMax\s*=\s*(\d+)", kernels.source("softmax_cuda.h")).group(1))
    thread_steps = [int(v) for v in re.findall(r"cols <= (\d+) \?", fast)]
    assert "cols <= kWarpRowMax" in fast
    assert sorted(suite.SWITCH_POINTS) == sorted([warp_max, *thread_steps]), "softmax_cuda.cu changed its switch points"
    assert re.search(r"cols % 4 == 0 && aligned16\(xp\) && aligned16\(yp\)", fast), "the float4 condition changed"
    for cols, threads in [(4096, 256), (4097, 512), (16384, 512), (16385, 1024)]:
        assert f"block of {threads}" in suite.fast_kernel_path(cols)
    assert re.search(r"cols <= 4096 \? 256 : \(cols <= 16384 \? 512 : 1024\)", fast), "thread counts changed"


def test_the_misaligned_case_is_contiguous_and_not_16_byte_aligned():
    x = suite.correctness_cases()["misaligned view (5, 2048), scalar path"]
    assert x.is_contiguous() and x.shape[1] % 4 == 0
    assert x.data_ptr() % 16 != 0


def test_the_tolerances_are_tight_enough_to_see_a_lost_partial_sum():
    # losing one of 1,024 equal partial sums is a 1e-3 error; the tolerance must be far below that at any width
    assert suite.row_sum_tolerance(1_000_000) < 2e-4
    assert suite.relative_tolerance(1024) < 1e-5


def test_benchmark_runs_on_cpu_and_its_table_shows_the_samples():
    rows = suite.benchmark({"torch.softmax": lambda x: torch.softmax(x, -1)}, shapes=[(8, 256)], device="cpu", min_run_time=0.01)
    assert [r["op"] for r in rows] == ["copy (y.copy_(x))", "torch.softmax"]
    for r in rows:
        assert r["blocks"] >= 5 and r["calls"] >= r["blocks"], r
        assert r["gbps"] == pytest.approx(suite.softmax_bytes(8, 256) / (r["median_us"] * 1e-6) / 1e9)
    table = suite.markdown_table(rows).splitlines()
    assert table[0].endswith("| calls | blocks |")
    assert table[3].endswith(f"| {rows[1]['calls']} | {rows[1]['blocks']} |")

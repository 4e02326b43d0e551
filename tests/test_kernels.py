"""helpers.kernels: the C++ softmax kernels and their registration as operators
(schema, fake kernel, autograd, opcheck, torch.compile), the CPU kernel variants,
the input checks, the loader's errors and lock handling, the CUDA sources
compiled with nvcc (loaded beside the CPU build), and the CUDA ops on a GPU.

The builds go where the notebook's go ($TORCH_EXTENSIONS_DIR, else
build/torch_extensions) with the same names and flags, so whichever runs
first compiles and the other reuses the build.
"""

from __future__ import annotations

import math
import os
import warnings
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import kernels
from helpers.kernels import KernelBuildError

INF = float("inf")
has_compiler = kernels.shutil.which(os.environ.get("CXX", "c++")) is not None


def _nvcc() -> str | None:
    home = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
    candidate = Path(home) / "bin" / "nvcc"
    return kernels.shutil.which("nvcc") or (str(candidate) if candidate.is_file() else None)


needs_compiler = pytest.mark.skipif(not has_compiler, reason="no C++ compiler on this machine")
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the CUDA ops cannot run here")


@pytest.fixture(scope="module")
def ops():
    return kernels.load_cpu_ops()


# ------------------------------------------------------------ correctness ----


def _edge_cases(dtype):
    finite = torch.finfo(dtype).max
    masked = torch.randn(3, 9, dtype=dtype, generator=torch.Generator().manual_seed(0))
    masked[:, ::2] = -INF
    return {
        "one column": torch.randn(5, 1, dtype=dtype),
        "one row, long": torch.randn(1, 100_003, dtype=dtype),
        "huge magnitudes": torch.tensor([[1e30, -1e30, 0.0, 3e37], [finite, -finite, finite, 0.0]], dtype=dtype),
        "-inf masks": masked,
        "constant row": torch.full((2, 6), 7.0, dtype=dtype),
        "cols not multiple of 4": torch.randn(4, 13, dtype=dtype),
    }


@needs_compiler
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
def test_cpu_softmax_matches_torch_on_edge_cases(ops, dtype):
    tol = 1e-6 if dtype == torch.float32 else 1e-13
    for label, x in _edge_cases(dtype).items():
        got, want = ops.softmax_cpu(x), torch.softmax(x, dim=-1)
        assert got.dtype == dtype and got.shape == x.shape, label
        torch.testing.assert_close(got, want, atol=tol, rtol=1e-5, msg=lambda m, label=label: f"{label}: {m}")
        assert torch.allclose(got.sum(-1), torch.ones((), dtype=dtype), atol=1e-5), label


@needs_compiler
def test_cpu_softmax_special_rows_match_torch(ops):
    x = torch.tensor([[-INF, -INF, -INF], [1.0, math.nan, 2.0], [-INF, 0.0, -INF]])
    got = ops.softmax_cpu(x)
    want = torch.softmax(x, -1)
    assert torch.isnan(got[0]).all() and torch.isnan(want[0]).all(), "an all -inf row is NaN, as in torch"
    assert torch.isnan(got[1]).all() and torch.isnan(want[1]).all(), "a NaN spreads over its row, as in torch"
    assert got[2].tolist() == [0.0, 1.0, 0.0], "masked entries are exactly 0"


@needs_compiler
@settings(max_examples=40, deadline=None, database=None)
@given(
    rows=st.integers(1, 40),
    cols=st.integers(1, 300),
    scale=st.sampled_from([1e-3, 1.0, 30.0, 1e4]),
    double=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_cpu_softmax_matches_torch_on_random_shapes(rows, cols, scale, double, seed):
    dtype = torch.float64 if double else torch.float32
    x = torch.randn(rows, cols, dtype=dtype, generator=torch.Generator().manual_seed(seed)) * scale
    got = kernels.softmax_cpu(x)
    torch.testing.assert_close(got, torch.softmax(x, -1), atol=1e-6 if not double else 1e-12, rtol=1e-5)


@needs_compiler
@pytest.mark.parametrize("variant", ["scalar_serial", "scalar", "scalar_float_sum", "vec", "vec_online"])
def test_every_cpu_variant_is_a_softmax(ops, variant):
    """Widths around the SIMD width (16 floats with AVX-512, 8 with AVX2) exercise the vector tails."""
    fn = torch.ops.course.softmax_cpu_variant
    for cols in (1, 7, 8, 15, 16, 17, 33, 130, 1000):
        x = torch.randn(9, cols, generator=torch.Generator().manual_seed(cols)) * 5
        torch.testing.assert_close(fn(x, variant), torch.softmax(x, -1), atol=1e-6, rtol=1e-5, msg=lambda m, c=cols: f"{variant}, cols={c}: {m}")
    for label, x in _edge_cases(torch.float32).items():
        torch.testing.assert_close(fn(x, variant), torch.softmax(x, -1), atol=1e-6, rtol=1e-5, msg=lambda m, label=label: f"{variant}, {label}: {m}")
    special = torch.tensor([[-INF] * 40, [0.0] * 39 + [math.nan], [math.nan] + [1.0] * 39, [-INF] * 39 + [2.0]])
    got = fn(special, variant)
    assert torch.isnan(got[:3]).all(), f"{variant}: all -inf and NaN rows must give NaN, as in torch.softmax"
    assert got[3].tolist() == [0.0] * 39 + [1.0], f"{variant}: masked entries must be exactly 0"


@needs_compiler
def test_the_exp_probe_is_not_a_softmax_and_unknown_variants_are_refused(ops):
    x = torch.randn(4, 64)
    assert not torch.allclose(torch.ops.course.softmax_cpu_variant(x, "scalar_no_exp"), torch.softmax(x, -1)), "the probe leaves exp out"
    with pytest.raises(RuntimeError, match="unknown variant 'fast'.*scalar_serial"):
        torch.ops.course.softmax_cpu_variant(x, "fast")


@needs_compiler
def test_cpu_build_has_openmp_and_the_simd_level_of_torch(ops):
    info = ops.cpu_build_info()
    assert "OpenMP on" in info, f"built without -fopenmp: at::parallel_for would run on one thread ({info})"
    level = torch.backends.cpu.get_cpu_capability()
    assert (level if level in ("AVX2", "AVX512") else "DEFAULT") in info, f"torch uses {level}, the build says: {info}"
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert ops.parallel_threads_used(4096, 4096) == 2, "4096 rows with a grain of 8 rows must go to both threads"
        assert ops.parallel_threads_used(4, 4096) == 1, "rows <= grain run on the calling thread"
    finally:
        torch.set_num_threads(before)


def test_cpu_vec_flags_follow_the_capability():
    assert "-DCPU_CAPABILITY_AVX512" in kernels.cpu_vec_flags("AVX512") and "-mavx512f" in kernels.cpu_vec_flags("AVX512")
    assert kernels.cpu_vec_flags("AVX2") == ["-mavx2", "-mfma", "-DCPU_CAPABILITY=AVX2", "-DCPU_CAPABILITY_AVX2"]
    assert kernels.cpu_vec_flags("DEFAULT") == [] and kernels.cpu_vec_flags("SVE256") == []
    assert kernels.cpu_vec_flags() == kernels.cpu_vec_flags(torch.backends.cpu.get_cpu_capability())
    flags = kernels.cpu_vec_flags("AVX2")
    flags.append("-x")
    assert kernels.cpu_vec_flags("AVX2")[-1] != "-x", "callers must get a copy"


@needs_compiler
def test_cpu_softmax_uses_several_threads_consistently(ops):
    x = torch.randn(4096, 64)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = ops.softmax_cpu(x)
        torch.set_num_threads(max(2, before))
        many = ops.softmax_cpu(x)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, many), "rows are independent: the thread count must not change the result"


# ------------------------------------------------------------ bad inputs -----


@needs_compiler
@pytest.mark.parametrize(
    "make, words",
    [
        (lambda: torch.randn(4, 8).t(), ["softmax_cpu", "contiguous", "strides [1, 8]", ".contiguous()"]),
        (lambda: torch.randn(4, 8).half(), ["dtype", "float32 or float64", "got float16"]),
        (lambda: torch.ones(4, 8, dtype=torch.int64), ["dtype", "got int64"]),
        (lambda: torch.randn(8), ["2-D", "got 1-D", "[8]", "reshape"]),
        (lambda: torch.randn(2, 3, 4), ["2-D", "got 3-D", "[2, 3, 4]"]),
        (lambda: torch.empty(0, 5), ["non-empty", "[0, 5]"]),
        (lambda: torch.randn(2, 3, device="meta"), ["CPU tensor", "meta"]),
    ],
    ids=["non-contiguous", "float16", "int64", "1-D", "3-D", "empty", "wrong device"],
)
def test_cpu_softmax_rejects_bad_input_with_a_clear_message(ops, make, words):
    with pytest.raises(RuntimeError) as info:
        ops.softmax_cpu(make())
    message = str(info.value)
    for word in words:
        assert word in message, f"{word!r} missing from: {message}"
    assert "Exception raised from" not in message, "the message should not carry a C++ backtrace"


@needs_compiler
@pytest.mark.parametrize(
    "make, words",
    [
        (lambda: torch.randn(4, 8).t(), ["softmax_cpu", "contiguous", ".contiguous()"]),
        (lambda: torch.randn(4, 8).half(), ["float32 or float64", "got float16"]),
        (lambda: torch.randn(8), ["2-D", "got 1-D"]),
        (lambda: torch.empty(0, 5), ["non-empty"]),
        (lambda: torch.randn(2, 3, device="meta"), ["CPU tensor", "meta"]),
    ],
    ids=["non-contiguous", "float16", "1-D", "empty", "wrong device"],
)
def test_the_wrapper_keeps_the_kernels_messages(ops, make, words):
    """helpers.kernels.softmax_cpu goes through the operator, yet a bad input gets the kernel's own message."""
    with pytest.raises(RuntimeError) as info:
        kernels.softmax_cpu(make())
    for word in words:
        assert word in str(info.value), f"{word!r} missing from: {info.value}"


# ------------------------------------------------------------ the operator ---


@needs_compiler
def test_the_operators_have_schemas_and_cpu_kernels(ops):
    assert str(torch.ops.course.softmax.default._schema) == "course::softmax(Tensor x) -> Tensor"
    assert str(torch.ops.course.softmax_cpu_variant.default._schema) == "course::softmax_cpu_variant(Tensor x, str variant) -> Tensor"
    assert torch.Tag.pt2_compliant_tag in torch.ops.course.softmax.default.tags
    for key in ("CPU", "Meta", "Autograd"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key("course::softmax", key), f"course::softmax has no {key} kernel"
    y = torch.ops.course.softmax(torch.randn(3, 7, device="meta"))
    assert y.device.type == "meta" and y.shape == (3, 7), "the fake kernel also serves meta tensors"


@needs_compiler
def test_the_fake_kernel_checks_the_kernels_metadata_rules(ops):
    """Meta tensors: float32 and float64 pass for course.softmax (the CPU kernel takes both), float32 only for
    the CUDA-only softmax_naive; empty, 1-D, non-contiguous and float16 inputs are refused like the kernels do."""
    for dtype in (torch.float32, torch.float64):
        y = torch.ops.course.softmax(torch.empty(3, 7, dtype=dtype, device="meta"))
        assert y.dtype == dtype and y.shape == (3, 7)
    assert torch.ops.course.softmax_naive(torch.empty(3, 7, device="meta")).shape == (3, 7)
    with pytest.raises(RuntimeError, match="softmax_naive: expected dtype torch.float32; got torch.float64"):
        torch.ops.course.softmax_naive(torch.empty(3, 7, dtype=torch.float64, device="meta"))
    bad = [(torch.empty(0, 7, device="meta"), "non-empty"), (torch.empty(7, device="meta"), "2-D"),
           (torch.empty(7, 3, device="meta").t(), "contiguous"), (torch.empty(3, 7, dtype=torch.half, device="meta"), "float16")]
    for x, word in bad:
        with pytest.raises(RuntimeError, match=word):
            torch.ops.course.softmax(x)
    with pytest.raises(RuntimeError, match="non-empty"):  # the real kernel says the same
        torch.ops.course.softmax(torch.empty(0, 7))


@needs_compiler
def test_python_registration_is_idempotent(ops):
    before = torch._C._dispatch_dump("course::softmax")
    assert kernels.register_python_parts() == [], "a second registration must change nothing"
    assert torch._C._dispatch_dump("course::softmax") == before, "the dispatcher's registrations changed"
    from torch._library.simple_registry import singleton

    assert singleton.find("course::softmax").fake_impl.kernel is not None


@needs_compiler
@pytest.mark.parametrize(
    "x",
    [torch.randn(8, 33), torch.randn(5, 16, requires_grad=True), torch.randn(3, 40, dtype=torch.float64, requires_grad=True)],
    ids=["fp32", "fp32-grad", "fp64-grad"],
)
def test_opcheck_passes(ops, x):
    result = torch.library.opcheck(torch.ops.course.softmax, (x,))
    assert all(v == "SUCCESS" for v in result.values()), result


@needs_compiler
def test_gradients_match_torch_softmax_and_finite_differences(ops):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(6, 37, generator=g, requires_grad=True)
    upstream = torch.randn(6, 37, generator=g)
    (got,) = torch.autograd.grad(kernels.softmax_cpu(x), x, upstream)
    (want,) = torch.autograd.grad(torch.softmax(x, -1), x, upstream)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
    x64 = torch.randn(4, 9, dtype=torch.float64, generator=g, requires_grad=True)
    assert torch.autograd.gradcheck(torch.ops.course.softmax, (x64,))
    assert torch.autograd.gradgradcheck(torch.ops.course.softmax, (x64,)), "the formula is built from torch ops, so it is twice differentiable"


@needs_compiler
def test_the_pybind_function_loses_the_graph_and_the_operator_does_not(ops):
    x = torch.randn(2, 5, requires_grad=True)
    assert ops.softmax_cpu(x).grad_fn is None, "the pybind11 function is invisible to autograd"
    assert torch.ops.course.softmax(x).grad_fn is not None


@needs_compiler
def test_the_operator_compiles_into_one_graph_and_the_pybind_function_breaks_it(ops):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def with_op(x):
        return torch.ops.course.softmax(x * 2.0) + 1.0

    def with_pybind(x):
        return ops.softmax_cpu(x * 2.0) + 1.0

    torch._dynamo.reset()
    x = torch.randn(4, 8)
    torch.testing.assert_close(torch.compile(with_op, fullgraph=True, backend=backend)(x), with_op(x))
    assert len(graphs) == 1
    calls = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert any("course.softmax" in c for c in calls), f"the graph should call the op: {calls}"
    torch._dynamo.reset()
    with warnings.catch_warnings(), pytest.raises(torch._dynamo.exc.Unsupported, match="marked as skipped"):
        warnings.simplefilter("ignore")  # Dynamo also warns (once per process) about the pybind11 function
        torch.compile(with_pybind, fullgraph=True, backend="eager")(x)
    torch._dynamo.reset()


# ------------------------------------------------------------ the loader -----


def test_missing_compiler_is_reported_with_the_fix(monkeypatch):
    monkeypatch.setenv("CXX", "no-such-c++")
    with pytest.raises(KernelBuildError, match=r"no C\+\+ compiler.*no-such-c\+\+.*build-essential"):
        kernels.check_toolchain(which=lambda name: None if name == "no-such-c++" else f"/bin/{name}")


def test_missing_ninja_is_reported_with_the_fix():
    def which(name):
        return None if "ninja" in name else f"/usr/bin/{name}"

    with pytest.raises(KernelBuildError, match="pip install ninja"):
        kernels.check_toolchain(which=which)


def test_missing_nvcc_is_reported_with_the_fix(monkeypatch):
    monkeypatch.setattr(kernels, "cuda_home", lambda: None)
    with pytest.raises(KernelBuildError, match="nvcc.*CUDA_HOME=/usr/local/cuda"):
        kernels.check_toolchain(cuda=True, which=lambda name: f"/usr/bin/{name}")


def test_cuda_home_skips_a_folder_that_is_not_a_toolkit(monkeypatch, tmp_path):
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(kernels._cpp_extension(), "CUDA_HOME", str(tmp_path))  # e.g. /usr/local from a wrapper nvcc
    expected = "/usr/local/cuda" if kernels._is_toolkit("/usr/local/cuda") else str(tmp_path)
    assert kernels.cuda_home() == expected
    monkeypatch.setenv("CUDA_HOME", "/opt/my-cuda")
    assert kernels.cuda_home() == "/opt/my-cuda", "an explicit CUDA_HOME wins"


def test_toolchain_found_names_each_tool():
    found = kernels.check_toolchain(which=lambda name: f"/usr/bin/{Path(name).name}")
    assert set(found) == {"c++", "ninja"}


def test_extensions_root_prefers_torch_extensions_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    assert kernels.extension_dir("x") == (tmp_path / "ext" / "x").resolve()
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR")
    monkeypatch.setenv("COURSE_BUILD_DIR", str(tmp_path / "b"))
    assert kernels.extension_dir("x") == tmp_path / "b" / "torch_extensions" / "x"


def test_cuda_arch_list_defaults_to_one_arch_without_a_gpu(monkeypatch):
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    if torch.cuda.is_available():
        assert kernels.cuda_arch_list(), "a visible GPU gives its own capability"
    else:
        assert kernels.cuda_arch_list() == kernels.DEFAULT_CUDA_ARCH
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0;9.0")
    assert kernels.cuda_arch_list() == "8.0;9.0"


def test_source_names_the_known_files():
    assert "at::parallel_for" in kernels.source("softmax_cpu.cpp")
    assert "TORCH_LIBRARY" in kernels.source("ops.cpp")
    assert "__shfl_xor_sync" in kernels.source("softmax_cuda.cu")
    with pytest.raises(FileNotFoundError, match="softmax_cpu.cpp"):
        kernels.source("nope.cu")


# ------------------------------------------------------------ the lock -------


def test_left_over_lock_file_is_told_apart_and_cleared(tmp_path):
    assert kernels.lock_status("demo", tmp_path) == "none"
    assert kernels.clear_stale_lock("demo", tmp_path) is False
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "lock").write_text("")
    assert kernels.lock_status("demo", tmp_path) == "left over"
    assert kernels.wait_for_lock("demo", tmp_path, timeout_s=1) < 1, "a lock file nobody holds must not block"
    assert kernels.clear_stale_lock("demo", tmp_path) is True
    assert not (tmp_path / "demo" / "lock").exists()


def test_held_lock_times_out_with_the_file_and_the_fix(tmp_path):
    from filelock import FileLock

    (tmp_path / "demo").mkdir()
    holder = FileLock(str(tmp_path / "demo" / "lock"))
    with holder:
        assert kernels.lock_status("demo", tmp_path) == "held"
        with pytest.raises(KernelBuildError, match=r"demo/lock.*held by another process.*clear_stale_lock"):
            kernels.wait_for_lock("demo", tmp_path, timeout_s=0.3, poll_s=0.05)
        with pytest.raises(KernelBuildError, match="held by a running process"):
            kernels.clear_stale_lock("demo", tmp_path)
        assert (tmp_path / "demo" / "lock").exists(), "a held lock must not be deleted"
    assert kernels.lock_status("demo", tmp_path) == "left over"


# ------------------------------------------------------------ caching --------


@needs_compiler
def test_second_load_returns_the_same_module(ops):
    assert kernels.load_cpu_ops() is ops
    folder = kernels.extension_dir(kernels.CPU_EXTENSION)
    assert any(folder.glob(f"{kernels.CPU_EXTENSION}*.so")), f"no built module in {folder}"


# ------------------------------------------------------------ CUDA -----------


@pytest.mark.slow
@pytest.mark.skipif(_nvcc() is None or not has_compiler, reason="no nvcc (CUDA toolkit) or C++ compiler here")
def test_cuda_sources_compile_with_nvcc(monkeypatch):
    """SLOW on a cold cache (about a minute): nvcc compiles softmax_cuda.cu for one arch.

    Runs in `make test` wherever nvcc exists, GPU or not; the build is cached
    in build/torch_extensions, so reruns take a second.
    """
    if kernels.cuda_home() is None:
        pytest.skip("no CUDA toolkit folder found; set CUDA_HOME=/usr/local/cuda")
    if not torch.cuda.is_available() and not os.environ.get("TORCH_CUDA_ARCH_LIST"):
        monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", kernels.DEFAULT_CUDA_ARCH)
    module = kernels.load_cuda_ops()  # loads the CPU build first: both in one process
    for op in ("softmax_naive", "softmax_fast"):
        assert hasattr(module, op), f"the CUDA module lacks {op}"
    for op in ("course::softmax", "course::softmax_naive"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op, "CUDA"), f"the CUDA build registered no CUDA kernel for {op}"
    assert torch._C._dispatch_has_kernel_for_dispatch_key("course::softmax", "CPU"), "the CPU kernel must survive the CUDA build's load"
    x = torch.randn(3, 5)
    torch.testing.assert_close(torch.ops.course.softmax(x), torch.softmax(x, -1))
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="softmax_fast: expected a CUDA tensor; got a tensor on cpu"):
            module.softmax_fast(x)
        with pytest.raises(RuntimeError, match="softmax_naive: expected a CUDA tensor"):
            kernels.softmax_naive(x)


def _cuda_cases():
    g = torch.Generator().manual_seed(0)
    masked = torch.randn(64, 1000, generator=g)
    masked[:, 500:] = -INF
    return {
        "one column": torch.randn(300, 1, generator=g),
        "short rows, odd": torch.randn(1000, 7, generator=g),
        "warp rows, float4": torch.randn(513, 1024, generator=g),
        "block rows, float4": torch.randn(64, 4096, generator=g),
        "block rows, scalar": torch.randn(33, 4099, generator=g),
        "very long row": torch.randn(1, 1_000_000, generator=g),
        "huge magnitudes": torch.tensor([[1e30, -1e30, 0.0, 3e38, -3e38, 5.0]] * 3),
        "-inf masks": masked,
        "one finite entry, warp rows": torch.cat([torch.full((8, 1023), -INF), torch.zeros(8, 1)], 1),
        "one finite entry, block rows": torch.cat([torch.full((8, 8191), -INF), torch.zeros(8, 1)], 1),
    }


@needs_gpu
@pytest.mark.parametrize("op", ["softmax_naive", "softmax_fast"])
def test_cuda_softmax_passes_the_correctness_suite(op):
    """The chapter's suite on the GPU: relative tolerances and row sums (an absolute 1e-6 passes a lost
    partial sum on the million-wide row), every switch point, NaN and +inf rows, and the bad inputs;
    then this file's own cases through the same comparison."""
    from helpers.kernels import suite

    fn = getattr(kernels.load_cuda_ops(), op)
    max_cols = suite.NAIVE_MAX_COLS if op == "softmax_naive" else None  # one thread walks the whole row: slow
    results = suite.correctness(fn, "cuda", max_cols=max_cols)
    failed = [(r["case"], r["tol_used"], r["worst_row_sum_err"]) for r in results if not r["ok"]]
    assert not failed, f"{op} fails the suite: {failed}"
    refused = suite.check_rejections(fn, "cuda")
    assert all(r["ok"] for r in refused), f"{op} accepts or misreports bad input: {refused}"
    for label, x in _cuda_cases().items():
        if max_cols is not None and x.shape[1] > max_cols:
            continue
        x = x.cuda()
        verdict = suite.compare(fn(x), x)
        assert verdict["ok"], f"{op}, {label}: {verdict}"


@needs_gpu
@pytest.mark.parametrize("op", ["softmax", "softmax_naive"])
def test_cuda_operator_passes_opcheck_and_has_gradients(op):
    kernels.load_cuda_ops()
    fn = getattr(torch.ops.course, op)
    x = torch.randn(8, 300, device="cuda", requires_grad=True)
    result = torch.library.opcheck(fn, (x,))
    assert all(v == "SUCCESS" for v in result.values()), result
    upstream = torch.randn_like(x)
    (got,) = torch.autograd.grad(fn(x), x, upstream)
    (want,) = torch.autograd.grad(torch.softmax(x, -1), x, upstream)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
    wrapper = kernels.softmax_fast if op == "softmax" else kernels.softmax_naive
    assert wrapper(x).grad_fn is not None, "the wrapper goes through the operator on CUDA tensors"


@needs_gpu
@pytest.mark.parametrize("cols", [128, 2048], ids=["warp", "block"])
def test_cuda_fast_scalar_path_on_misaligned_rows(cols):
    fast = kernels.load_cuda_ops().softmax_fast
    base = torch.randn(4 * cols + 1, device="cuda")
    x = base[1:].view(4, cols)  # contiguous, cols % 4 == 0, but starts 4 bytes past 16-byte alignment
    assert x.is_contiguous() and x.data_ptr() % 16 != 0
    torch.testing.assert_close(fast(x), torch.softmax(x, -1))


@needs_gpu
@pytest.mark.parametrize("op", ["softmax_naive", "softmax_fast"])
def test_cuda_softmax_runs_on_the_current_stream(op):
    fn = getattr(kernels.load_cuda_ops(), op)
    x = torch.randn(256, 512, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = fn(x)
        want = torch.softmax(x, -1)
    side.synchronize()
    torch.testing.assert_close(y, want)


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two CUDA devices")
@pytest.mark.parametrize("op", ["softmax_naive", "softmax_fast"])
def test_cuda_softmax_on_a_second_gpu(op):
    fn = getattr(kernels.load_cuda_ops(), op)
    x = torch.randn(64, 4096, device="cuda:1")
    with torch.cuda.device(0):  # the current device is another one than the tensor's: the op's CUDAGuard must switch
        y = fn(x)
    assert y.device == x.device
    torch.testing.assert_close(y, torch.softmax(x, -1))


@pytest.mark.slow
@needs_gpu
@pytest.mark.parametrize("cols", [512, 4096], ids=["warp", "block"])
def test_cuda_fast_past_2_to_the_31_elements(cols):
    """More than 2**31 elements: the row offsets need 64-bit arithmetic. Needs ~18 GB of free GPU memory."""
    rows = 2**31 // cols + 8
    if torch.cuda.mem_get_info()[0] < 2.2 * rows * cols * 4:
        pytest.skip("not enough free GPU memory for an input and output of more than 2**31 floats")
    x = torch.empty(rows, cols, device="cuda")
    x[-8:].normal_()
    x[:-8].fill_(0.0)
    y = kernels.load_cuda_ops().softmax_fast(x)
    torch.testing.assert_close(y[-8:], torch.softmax(x[-8:], -1))
    torch.testing.assert_close(y[:4], torch.full((4, cols), 1.0 / cols, device="cuda"))
    del x, y
    torch.cuda.empty_cache()


@needs_gpu
@pytest.mark.parametrize("op", ["softmax_naive", "softmax_fast"])
def test_cuda_softmax_rejects_bad_input(op):
    fn = getattr(kernels.load_cuda_ops(), op)
    x = torch.randn(8, 16, device="cuda")
    for bad, word in [(x.t(), "contiguous"), (x.double(), "got float64"), (x.cpu(), "CUDA tensor"), (x[0], "2-D"), (x[:0], "non-empty")]:
        with pytest.raises(RuntimeError, match=word):
            fn(bad)

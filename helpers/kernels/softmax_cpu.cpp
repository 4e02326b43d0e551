// Row-wise softmax on the CPU: the scalar loop, the steps that made it fast,
// and the op the course registers (softmax_cpu).
//
// Every function takes a contiguous 2-D tensor (rows, cols) and returns the
// softmax of every row (over the last dim). Rows are independent, so
// at::parallel_for splits them over PyTorch's intra-op threads (the pool
// torch.set_num_threads sets).
//
// Per row: the maximum m is subtracted before exp() so that exp never
// overflows (exp(x - m) <= 1). A row whose entries are all -inf has
// m = -inf and -inf - (-inf) = NaN, so it gives NaN, exactly like
// torch.softmax; a NaN anywhere in a row makes the whole row NaN, also like
// torch.softmax.
//
// The kernels, in the order the notebook measures them:
//   scalar_serial     three loops with std::exp, the sum in double, all rows on one
//                     thread: the first version, as it ran when built without -fopenmp
//   scalar            the same loops, rows split over threads by at::parallel_for
//   scalar_float_sum  the same with the sum in float (is the double sum the cost?)
//   scalar_no_exp     the same with exp left out (WRONG results: it times everything but exp)
//   vec               at::vec::Vectorized<float>: max, exp (Sleef) and sum a SIMD register at a time
//   vec_online        the online softmax (max and sum in one pass) with the same vectors
// softmax_cpu (the op) runs `vec` for float32 and the scalar loop for float64.
#include <ATen/AccumulateType.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/TensorIterator.h>  // at::internal::GRAIN_SIZE
#include <ATen/ops/empty_like.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "softmax_common.h"

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Hand each thread at least ~32k elements: fewer, and the threads' start-up
// costs more than the work.
int64_t grain_for(int64_t cols) { return std::max<int64_t>(1, at::internal::GRAIN_SIZE / cols); }

// --------------------------------------------------------------- scalar --
// kExp = false leaves exp out (a timing probe, not a softmax). kParallel =
// false runs every row on the calling thread, which is what at::parallel_for
// itself does in code compiled without -fopenmp (see ATen/Parallel-inl.h:
// without _OPENMP it calls f(begin, end) directly).
template <typename scalar_t, typename acc_t, bool kExp = true, bool kParallel = true>
void softmax_rows_scalar(const scalar_t* x, scalar_t* y, int64_t rows, int64_t cols) {
  auto body = [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const scalar_t* xr = x + r * cols;
      scalar_t* yr = y + r * cols;
      scalar_t m = -std::numeric_limits<scalar_t>::infinity();
      for (int64_t j = 0; j < cols; ++j) m = std::max(m, xr[j]);  // pass 1: the maximum
      acc_t sum = 0;
      for (int64_t j = 0; j < cols; ++j) {  // pass 2: exp(x - m), stored, and their sum
        const scalar_t e = kExp ? std::exp(xr[j] - m) : xr[j] - m;
        yr[j] = e;
        sum += e;
      }
      const scalar_t inv = static_cast<scalar_t>(acc_t(1) / sum);
      for (int64_t j = 0; j < cols; ++j) yr[j] *= inv;  // pass 3: normalise
    }
  };
  if (kParallel) {
    at::parallel_for(0, rows, grain_for(cols), body);
  } else {
    body(0, rows);
  }
}

// ------------------------------------------------------------ vectorised --
using Vec = at::vec::Vectorized<float>;  // 16 floats with AVX-512, 8 with AVX2
// Vectors added in float lanes before the lanes go into the double total:
// each lane sums at most kFlush terms in float, the rest is summed in double.
constexpr int64_t kFlush = 64;

// Add the lanes of v to a double.
inline double add_lanes(double total, const Vec& v) {
  float lanes[Vec::size()];
  v.store(lanes);
  for (int i = 0; i < Vec::size(); ++i) total += lanes[i];
  return total;
}

inline float row_max(const float* xr, int64_t cols) {
  const int64_t n = cols - cols % Vec::size();  // the part that fills whole vectors
  float m = -kInf;
  if (n > 0) {
    Vec vm = Vec::loadu(xr);
    for (int64_t j = Vec::size(); j < n; j += Vec::size()) vm = at::vec::maximum(vm, Vec::loadu(xr + j));
    m = at::vec::vec_reduce_all<float>([](Vec& a, Vec& b) { return at::vec::maximum(a, b); }, vm);
  }
  for (int64_t j = n; j < cols; ++j) m = std::isnan(xr[j]) ? xr[j] : std::max(m, xr[j]);  // NaN wins, as in maximum
  return m;
}

// y = e * inv, a vector at a time, in place.
inline void scale_row(float* yr, int64_t cols, float inv) {
  const int64_t n = cols - cols % Vec::size();
  const Vec vinv(inv);
  for (int64_t j = 0; j < n; j += Vec::size()) (Vec::loadu(yr + j) * vinv).store(yr + j);
  for (int64_t j = n; j < cols; ++j) yr[j] *= inv;
}

// Three passes, like the scalar loop, each a SIMD register at a time: one exp per element.
void softmax_rows_vec(const float* x, float* y, int64_t rows, int64_t cols) {
  at::parallel_for(0, rows, grain_for(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * cols;
      float* yr = y + r * cols;
      const int64_t n = cols - cols % Vec::size();
      const float m = row_max(xr, cols);  // pass 1
      const Vec vm(m);
      double sum = 0;
      Vec part(0.f);
      int64_t k = 0;
      for (int64_t j = 0; j < n; j += Vec::size()) {  // pass 2: e = exp(x - m), stored and summed
        const Vec e = (Vec::loadu(xr + j) - vm).exp();
        e.store(yr + j);
        part = part + e;
        if (++k == kFlush) {
          sum = add_lanes(sum, part);
          part = Vec(0.f);
          k = 0;
        }
      }
      sum = add_lanes(sum, part);
      for (int64_t j = n; j < cols; ++j) {
        const float e = std::exp(xr[j] - m);
        yr[j] = e;
        sum += e;
      }
      scale_row(yr, cols, static_cast<float>(1.0 / sum));  // pass 3
    }
  });
}

// Online softmax: one pass finds the maximum and the sum together. Each lane
// keeps its own running (m, d); a block of kBlock vectors is read twice from
// L1 (its maximum first, then its exps), so the old sum is rescaled once per
// block rather than once per element. The second pass must recompute
// exp(x - m) to write y: two exps per element in all, against one for `vec`.
void softmax_rows_vec_online(const float* x, float* y, int64_t rows, int64_t cols) {
  constexpr int64_t kBlock = 8;
  at::parallel_for(0, rows, grain_for(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * cols;
      float* yr = y + r * cols;
      const int64_t n = cols - cols % Vec::size();
      Vec vm(-kInf), vd(0.f);
      for (int64_t j0 = 0; j0 < n; j0 += kBlock * Vec::size()) {
        const int64_t j1 = std::min(n, j0 + kBlock * Vec::size());
        Vec bm = vm;
        for (int64_t j = j0; j < j1; j += Vec::size()) bm = at::vec::maximum(bm, Vec::loadu(xr + j));
        // Lanes whose maximum is still -inf keep d = 0 (avoids -inf - (-inf)).
        const Vec finite = bm != Vec(-kInf);
        Vec add(0.f);
        for (int64_t j = j0; j < j1; j += Vec::size()) add = add + (Vec::loadu(xr + j) - bm).exp();
        vd = Vec::blendv(vd, vd * (vm - bm).exp() + add, finite);
        vm = bm;
      }
      // Merge the lanes: m = max, d = sum of d_i * exp(m_i - m), then the tail.
      float lm[Vec::size()], ld[Vec::size()];
      vm.store(lm);
      vd.store(ld);
      float m = -kInf;
      for (int i = 0; i < Vec::size(); ++i) m = std::isnan(lm[i]) ? lm[i] : std::max(m, lm[i]);
      for (int64_t j = n; j < cols; ++j) m = std::isnan(xr[j]) ? xr[j] : std::max(m, xr[j]);
      double sum = 0;
      for (int i = 0; i < Vec::size(); ++i) {
        if (lm[i] != -kInf) sum += static_cast<double>(ld[i]) * std::exp(static_cast<double>(lm[i]) - m);
      }
      for (int64_t j = n; j < cols; ++j) sum += std::exp(xr[j] - m);
      if (m == -kInf || std::isnan(m)) sum = std::numeric_limits<double>::quiet_NaN();  // like torch.softmax
      const Vec vmax(m);
      const Vec vinv(static_cast<float>(1.0 / sum));
      for (int64_t j = 0; j < n; j += Vec::size()) ((Vec::loadu(xr + j) - vmax).exp() * vinv).store(yr + j);
      for (int64_t j = n; j < cols; ++j) yr[j] = std::exp(xr[j] - m) * static_cast<float>(1.0 / sum);
    }
  });
}

}  // namespace

// The op: at::vec for float32, the scalar loop (sum in double) for float64.
at::Tensor softmax_cpu(const at::Tensor& x) {
  course::check_softmax_input(x, "softmax_cpu", at::kCPU, {at::kFloat, at::kDouble},
                              "Convert with x.float() first");
  at::Tensor y = at::empty_like(x);
  if (x.scalar_type() == at::kFloat) {
    softmax_rows_vec(x.data_ptr<float>(), y.data_ptr<float>(), x.size(0), x.size(1));
  } else {
    softmax_rows_scalar<double, double>(x.data_ptr<double>(), y.data_ptr<double>(), x.size(0), x.size(1));
  }
  return y;
}

// One of the kernels above by name, for float32 (the notebook's measured path).
at::Tensor softmax_cpu_variant(const at::Tensor& x, c10::string_view variant) {
  course::check_softmax_input(x, "softmax_cpu_variant", at::kCPU, {at::kFloat}, "Convert with x.float() first");
  at::Tensor y = at::empty_like(x);
  const float* xp = x.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const int64_t rows = x.size(0), cols = x.size(1);
  if (variant == "scalar_serial") {
    softmax_rows_scalar<float, double, true, false>(xp, yp, rows, cols);
  } else if (variant == "scalar") {
    softmax_rows_scalar<float, double>(xp, yp, rows, cols);
  } else if (variant == "scalar_float_sum") {
    softmax_rows_scalar<float, float>(xp, yp, rows, cols);
  } else if (variant == "scalar_no_exp") {
    softmax_rows_scalar<float, double, false>(xp, yp, rows, cols);
  } else if (variant == "vec") {
    softmax_rows_vec(xp, yp, rows, cols);
  } else if (variant == "vec_online") {
    softmax_rows_vec_online(xp, yp, rows, cols);
  } else {
    TORCH_CHECK(false, "softmax_cpu_variant: unknown variant '", std::string(variant),
                "'; expected scalar_serial, scalar, scalar_float_sum, scalar_no_exp, vec or vec_online");
  }
  return y;
}

// How this file was compiled: the SIMD instructions at::vec uses, and OpenMP.
std::string cpu_build_info() {
#if defined(CPU_CAPABILITY_AVX512)
  std::string info = "at::vec: AVX512, " + std::to_string(Vec::size()) + " floats per Vectorized<float>, exp = Sleef_expf16_u10";
#elif defined(CPU_CAPABILITY_AVX2)
  std::string info = "at::vec: AVX2, " + std::to_string(Vec::size()) + " floats per Vectorized<float>, exp = Sleef_expf8_u10";
#else
  std::string info = "at::vec: DEFAULT (no SIMD flags): Vectorized<float> is a plain array, exp calls std::exp per element";
#endif
#ifdef _OPENMP
  info += "; OpenMP on: at::parallel_for uses " + std::to_string(at::get_num_threads()) + " threads";
#else
  info += "; OpenMP off: at::parallel_for runs every range on the calling thread";
#endif
  return info;
}

// How many distinct threads at::parallel_for hands the rows of a (rows, cols)
// input to, with the kernels' grain: the number that actually work on it.
int64_t parallel_threads_used(int64_t rows, int64_t cols) {
  std::mutex mu;
  std::set<std::thread::id> ids;
  at::parallel_for(0, rows, grain_for(cols), [&](int64_t, int64_t) {
    const std::lock_guard<std::mutex> hold(mu);
    ids.insert(std::this_thread::get_id());
  });
  return static_cast<int64_t>(ids.size());
}

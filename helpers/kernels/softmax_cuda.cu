// Row-wise softmax on a CUDA GPU: the naive kernel and a fast one.
//
// Both ops take a contiguous 2-D float32 CUDA tensor (rows, cols) and return
// the softmax of every row (over the last dim), on the tensor's device and on
// the current CUDA stream.
//
// softmax_naive: ONE THREAD PER ROW, three passes over the row (maximum, sum
// of exp, write). This is the version often published. It is slow for two
// reasons. (1) Uncoalesced loads: at each step the 32 threads of a warp read
// 32 addresses that are `cols` floats apart, so every 4-byte read costs a
// separate 32-byte memory transaction. (2) Low parallelism: a (64, 4096)
// input launches 64 threads, on a GPU that runs more than 100,000 at once.
//
// softmax_fast: a WARP (32 threads) per row when cols <= 1024, else a BLOCK
// (256 to 1024 threads) per row. Neighbouring threads read neighbouring
// elements (coalesced), as float4 (16 bytes per load) when every row starts
// on a 16-byte boundary (cols % 4 == 0 and aligned pointers), one float at a
// time otherwise. The maximum and the sum are found in ONE pass with the
// "online softmax" recurrence (M. Milakov and N. Gimelshein, "Online
// normalizer calculation for softmax", arXiv:1805.02867, 2018):
//
//   m_j = max(m_{j-1}, x_j)
//   d_j = d_{j-1} * exp(m_{j-1} - m_j) + exp(x_j - m_j)
//
// so d_n = sum_j exp(x_j - m_n). Partial results (m_a, d_a) and (m_b, d_b)
// of two parts of a row merge the same way:
//
//   m = max(m_a, m_b),   d = d_a * exp(m_a - m) + d_b * exp(m_b - m)
//
// which lets each thread keep its own (m, d), then combine across the warp
// with __shfl_xor_sync (a butterfly: after 5 steps every lane holds the
// row's result) and, for a block, across warps through shared memory. A
// second pass writes y = exp(x - m) / d. Memory traffic: 2 reads + 1 write
// per element, against 3 reads + 1 write for the three-pass version.
//
// Special values, the same as torch.softmax: a row that is entirely -inf
// gives NaN (its maximum is -inf and -inf - (-inf) is NaN); a NaN anywhere in
// a row makes the row NaN; -inf entries in an otherwise finite row (masks)
// give exactly 0; magnitudes up to float32's max (3.4e38) do not overflow
// because exp is only ever taken of x - max <= 0.
//
// Built without --use_fast_math: softmax is limited by memory bandwidth, so the
// approximate __expf would not make it measurably faster, and fast-math's
// flush-to-zero and relaxed special values would change results.
// Kernels and launchers only, with no ATen header: softmax_cuda_host.cpp
// (compiled by the C++ compiler) wraps the launchers as at::Tensor functions.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "softmax_cuda.h"

namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarpSize = 32;
using course_cuda::kWarpRowMax;
using course_cuda::kWarpsPerBlock;

// ---------------------------------------------------------------- naive --
__global__ void softmax_naive_kernel(const float* __restrict__ x, float* __restrict__ y,
                                     int64_t rows, int64_t cols) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const float* xr = x + row * cols;
  float* yr = y + row * cols;
  float m = -INFINITY;
  for (int64_t j = 0; j < cols; ++j) m = fmaxf(m, xr[j]);  // pass 1
  float sum = 0.f;
  for (int64_t j = 0; j < cols; ++j) sum += expf(xr[j] - m);  // pass 2
  for (int64_t j = 0; j < cols; ++j) yr[j] = expf(xr[j] - m) / sum;  // pass 3
}

// ----------------------------------------------------------------- fast --
// Add one element v to a running (m, d). One exp per element: when v is a
// new maximum the old sum is rescaled, otherwise exp(v - m) is added.
__device__ __forceinline__ void online_add(float& m, float& d, float v) {
  if (v > m) {
    d = d * expf(m - v) + 1.f;  // exp(-inf) = 0 handles the first element
    m = v;
  } else if (v != -INFINITY) {  // skip -inf (adds 0; avoids -inf - (-inf)); NaN gets here and spreads
    d += expf(v - m);
  }
}

// Merge a partial (m2, d2) into (m, d).
__device__ __forceinline__ void online_merge(float& m, float& d, float m2, float d2) {
  const float mx = fmaxf(m, m2);
  if (mx == -INFINITY) {  // both parts still empty (all -inf so far); keep a NaN if there is one
    d += d2;
    return;
  }
  d = d * expf(m - mx) + d2 * expf(m2 - mx);
  m = mx;
}

// Butterfly reduction: afterwards every lane of the warp holds the warp's (m, d).
__device__ __forceinline__ void warp_merge(float& m, float& d) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const float m2 = __shfl_xor_sync(kFullMask, m, offset);
    const float d2 = __shfl_xor_sync(kFullMask, d, offset);
    online_merge(m, d, m2, d2);
  }
}

// Pass 1 over one row by `nthreads` cooperating threads (thread index `tid`).
template <bool kVec>
__device__ __forceinline__ void row_stats(const float* __restrict__ xr, int64_t cols, int tid,
                                          int nthreads, float& m, float& d) {
  m = -INFINITY;
  d = 0.f;
  if (kVec) {
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    for (int64_t i = tid; i < cols / 4; i += nthreads) {
      const float4 v = x4[i];
      online_add(m, d, v.x);
      online_add(m, d, v.y);
      online_add(m, d, v.z);
      online_add(m, d, v.w);
    }
  } else {
    for (int64_t i = tid; i < cols; i += nthreads) online_add(m, d, xr[i]);
  }
}

// Pass 2: y = exp(x - m) / d.
template <bool kVec>
__device__ __forceinline__ void row_write(const float* __restrict__ xr, float* __restrict__ yr,
                                          int64_t cols, int tid, int nthreads, float m, float d) {
  const float inv = 1.f / d;  // d = 0 (all -inf) or NaN gives NaN below, like torch.softmax
  if (kVec) {
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    float4* y4 = reinterpret_cast<float4*>(yr);
    for (int64_t i = tid; i < cols / 4; i += nthreads) {
      const float4 v = x4[i];
      y4[i] = make_float4(expf(v.x - m) * inv, expf(v.y - m) * inv, expf(v.z - m) * inv,
                          expf(v.w - m) * inv);
    }
  } else {
    for (int64_t i = tid; i < cols; i += nthreads) yr[i] = expf(xr[i] - m) * inv;
  }
}

// One warp per row: blockDim = (32, kWarpsPerBlock).
template <bool kVec>
__global__ void softmax_warp_kernel(const float* __restrict__ x, float* __restrict__ y,
                                    int64_t rows, int64_t cols) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  if (row >= rows) return;  // the whole warp leaves together, so the shuffles stay full
  const float* xr = x + row * cols;
  float m, d;
  row_stats<kVec>(xr, cols, threadIdx.x, kWarpSize, m, d);
  warp_merge(m, d);
  row_write<kVec>(xr, y + row * cols, cols, threadIdx.x, kWarpSize, m, d);
}

// One block per row: warps merge with shuffles, then warp 0 merges the warps'
// results read from shared memory and publishes the row's (m, d).
template <bool kVec>
__global__ void softmax_block_kernel(const float* __restrict__ x, float* __restrict__ y,
                                     int64_t cols) {
  __shared__ float shared_m[kWarpSize];
  __shared__ float shared_d[kWarpSize];
  const int64_t row = blockIdx.x;
  const float* xr = x + row * cols;
  const int tid = threadIdx.x;
  const int lane = tid % kWarpSize;
  const int warp = tid / kWarpSize;
  const int nwarps = blockDim.x / kWarpSize;
  float m, d;
  row_stats<kVec>(xr, cols, tid, blockDim.x, m, d);
  warp_merge(m, d);
  if (lane == 0) {
    shared_m[warp] = m;
    shared_d[warp] = d;
  }
  __syncthreads();
  if (warp == 0) {
    m = lane < nwarps ? shared_m[lane] : -INFINITY;
    d = lane < nwarps ? shared_d[lane] : 0.f;
    warp_merge(m, d);
    if (lane == 0) {
      shared_m[0] = m;
      shared_d[0] = d;
    }
  }
  __syncthreads();
  row_write<kVec>(xr, y + row * cols, cols, tid, blockDim.x, shared_m[0], shared_d[0]);
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace

cudaError_t course_cuda::launch_softmax_naive(const float* x, float* y, int64_t rows, int64_t cols,
                                              cudaStream_t stream) {
  const int threads = 256;
  const auto blocks = static_cast<unsigned>((rows + threads - 1) / threads);
  softmax_naive_kernel<<<blocks, threads, 0, stream>>>(x, y, rows, cols);
  return cudaGetLastError();
}

// The row-count limits of these launches are checked by the caller (softmax_cuda_host.cpp).
cudaError_t course_cuda::launch_softmax_fast(const float* xp, float* yp, int64_t rows, int64_t cols,
                                             cudaStream_t stream) {
  const bool vec = cols % 4 == 0 && aligned16(xp) && aligned16(yp);
  if (cols <= kWarpRowMax) {
    const dim3 block(kWarpSize, kWarpsPerBlock);
    const auto blocks = static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
    if (vec) {
      softmax_warp_kernel<true><<<blocks, block, 0, stream>>>(xp, yp, rows, cols);
    } else {
      softmax_warp_kernel<false><<<blocks, block, 0, stream>>>(xp, yp, rows, cols);
    }
  } else {
    const int threads = cols <= 4096 ? 256 : (cols <= 16384 ? 512 : 1024);
    const auto blocks = static_cast<unsigned>(rows);
    if (vec) {
      softmax_block_kernel<true><<<blocks, threads, 0, stream>>>(xp, yp, cols);
    } else {
      softmax_block_kernel<false><<<blocks, threads, 0, stream>>>(xp, yp, cols);
    }
  }
  return cudaGetLastError();
}

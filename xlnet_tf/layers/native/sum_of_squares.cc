// The sum of the squares of every element of a list of tensors, as one float32 scalar (a TensorFlow CPU op): a
// gradient norm's reduction, each element read once in its own dtype (bfloat16 or float32).
//
// The elements are cut into fixed chunks (kChunk elements of one tensor); a chunk sums blocks of kBlock squares in
// float32 and adds each block's sum to a double; the chunks' doubles are added in list order. The order of every sum
// is fixed by the shapes alone, so the same input gives the same bits whatever the thread pool does (within one
// build: an AVX2 build and a portable one add in different orders). A bfloat16 value's square is exact in float32, so
// for bfloat16 only the block sums round; float32 squares round once more. Its gradient (2x) is registered where the
// library is loaded (library.py).

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#ifdef __AVX2__
#include <immintrin.h>
#endif

#include "bfloat16_bits.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/util/work_sharder.h"

namespace xlnet_tf {
namespace {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpInputList;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

static_assert(std::numeric_limits<float>::is_iec559 && std::numeric_limits<double>::is_iec559,
              "IEEE float and double");

constexpr int64_t kChunk = 1 << 16;  // elements per unit of work
constexpr int64_t kBlock = 256;      // squares summed in float32 before a double takes them

template <typename T>
double ChunkSum(const T* x, int64_t n) {
  double total = 0.0;
  int64_t start = 0;
#ifdef __AVX2__
  if constexpr (std::is_same_v<T, Eigen::bfloat16>) {  // whole blocks: 32 elements per step, four accumulators
    const __m256i zero = _mm256_setzero_si256();
    for (; start + kBlock <= n; start += kBlock) {
      __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
      for (int64_t j = start; j < start + kBlock; j += 32) {
        const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + j));
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + j + 16));
        // a bfloat16's bits above 16 zero bits are its float32 (the order within the block is fixed: a sum)
        const __m256 f[4] = {_mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, u)),
                             _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, u)),
                             _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, w)),
                             _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, w))};
        for (int k = 0; k < 4; ++k) a[k] = _mm256_add_ps(a[k], _mm256_mul_ps(f[k], f[k]));
      }
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, _mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])));
      total += static_cast<double>(((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
                                   ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7])));
    }
  }
#endif
  for (; start < n; start += kBlock) {
    const int64_t end = std::min(n, start + kBlock);
    float block = 0.f;
#pragma omp simd reduction(+ : block)
    for (int64_t j = start; j < end; ++j) {
      const float v = Widen(x[j]);
      block += v * v;
    }
    total += static_cast<double>(block);
  }
  return total;
}

struct Chunk {
  int tensor;
  int64_t begin, end;
};

template <typename T>
class SumOfSquaresOp : public OpKernel {
 public:
  explicit SumOfSquaresOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    OpInputList xs;
    OP_REQUIRES_OK(ctx, ctx->input_list("x", &xs));
    std::vector<Chunk> chunks;
    std::vector<const T*> data(xs.size());
    for (int i = 0; i < xs.size(); ++i) {
      data[i] = xs[i].flat<T>().data();
      const int64_t n = xs[i].NumElements();
      for (int64_t begin = 0; begin < n; begin += kChunk) {
        chunks.push_back({i, begin, std::min(n, begin + kChunk)});
      }
    }
    std::vector<double> partial(chunks.size(), 0.0);
    auto work = [&](int64_t first, int64_t last) {
      for (int64_t c = first; c < last; ++c) {
        const Chunk& k = chunks[c];
        partial[c] = ChunkSum(data[k.tensor] + k.begin, k.end - k.begin);
      }
    };
    auto* pool = ctx->device()->tensorflow_cpu_worker_threads();
    ::tensorflow::Shard(pool->num_threads, pool->workers, static_cast<int64_t>(chunks.size()), 4 * kChunk, work);
    double total = 0.0;
    for (double p : partial) total += p;  // in list order: deterministic
    Tensor* out;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    // IEEE conversion: a total above float32's range is inf, a NaN stays NaN (a NaN or inf gradient anywhere makes
    // the norm non-finite, which the Trainer's clip relies on)
    out->scalar<float>()() = static_cast<float>(total);
  }
};

}  // namespace

REGISTER_OP("XlnetTfSumOfSquares")
    .Input("x: N * T")
    .Output("sum: float")
    .Attr("T: {bfloat16, float}")
    .Attr("N: int >= 1")
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape);

#define REGISTER(T)                                                                                    \
  REGISTER_KERNEL_BUILDER(Name("XlnetTfSumOfSquares").Device(DEVICE_CPU).TypeConstraint<T>("T"),       \
                          SumOfSquaresOp<T>);
REGISTER(float)
REGISTER(Eigen::bfloat16)
#undef REGISTER

}  // namespace xlnet_tf

// Layer normalization over the last axis, forward and backward, each one pass over its rows (a TensorFlow CPU op).
//
// x [rows, D] (float32 or bfloat16; any leading shape), gamma and beta [D] float32. Every row is normalized in
// float32 as tf.nn.moments does it (mean, then the mean of squared differences), y in x's dtype (rounded to nearest
// even). The backward takes the forward's per-row mean and 1/sqrt(var + eps) and gives dx in x's dtype and the
// float32 gradients of gamma and beta. Rows are split into fixed blocks, so the column sums (dgamma, dbeta) add the
// blocks' partial sums in one order whatever the thread pool does: the same input gives the same bits.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "bfloat16_bits.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/work_sharder.h"

namespace xlnet_tf {
namespace {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::errors::InvalidArgument;
namespace shape_inference = ::tensorflow::shape_inference;

constexpr int64_t kBlockRows = 16;  // rows per block of the backward's column sums

template <typename T>
void ForwardRow(const T* x, const float* gamma, const float* beta, float eps, int64_t d, float* wide, T* y,
                float* mean_out, float* rstd_out) {
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < d; ++j) {
    wide[j] = Widen(x[j]);
    sum += wide[j];
  }
  const float mean = sum / static_cast<float>(d);
  float squares = 0.f;
#pragma omp simd reduction(+ : squares)
  for (int64_t j = 0; j < d; ++j) {
    const float c = wide[j] - mean;
    squares += c * c;
  }
  const float var = squares / static_cast<float>(d);
  const float rstd = 1.f / std::sqrt(var + eps);
#pragma omp simd
  for (int64_t j = 0; j < d; ++j) {
    Narrow((wide[j] - mean) * rstd * gamma[j] + beta[j], &y[j]);
  }
  *mean_out = mean;
  *rstd_out = rstd;
}

template <typename T>
class LayerNormOp : public OpKernel {
 public:
  explicit LayerNormOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("epsilon", &epsilon_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& gamma = ctx->input(1);
    const Tensor& beta = ctx->input(2);
    OP_REQUIRES(ctx, x.dims() >= 1, InvalidArgument("XlnetTfLayerNorm: x needs an axis to normalize"));
    const int64_t d = x.dim_size(x.dims() - 1);
    OP_REQUIRES(ctx, gamma.NumElements() == d && beta.NumElements() == d,
                InvalidArgument("XlnetTfLayerNorm: gamma and beta must have x's last size ", d));
    const int64_t rows = d == 0 ? 0 : x.NumElements() / d;
    TensorShape row_shape = x.shape();
    row_shape.RemoveLastDims(1);
    Tensor *y, *mean, *rstd;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &y));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, row_shape, &mean));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, row_shape, &rstd));
    if (rows == 0) return;
    const T* xp = x.flat<T>().data();
    const float* gp = gamma.flat<float>().data();
    const float* bp = beta.flat<float>().data();
    T* yp = y->flat<T>().data();
    float* mp = mean->flat<float>().data();
    float* rp = rstd->flat<float>().data();
    const float eps = epsilon_;
    auto work = [&](int64_t begin, int64_t end) {
      std::vector<float> wide(d);
      for (int64_t r = begin; r < end; ++r) {
        ForwardRow(xp + r * d, gp, bp, eps, d, wide.data(), yp + r * d, mp + r, rp + r);
      }
    };
    auto* pool = ctx->device()->tensorflow_cpu_worker_threads();
    ::tensorflow::Shard(pool->num_threads, pool->workers, rows, 8 * d, work);
  }

 private:
  float epsilon_;
};

template <typename T>
class LayerNormGradOp : public OpKernel {
 public:
  explicit LayerNormGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& dy = ctx->input(0);
    const Tensor& x = ctx->input(1);
    const Tensor& gamma = ctx->input(2);
    const Tensor& mean = ctx->input(3);
    const Tensor& rstd = ctx->input(4);
    OP_REQUIRES(ctx, dy.shape() == x.shape(), InvalidArgument("XlnetTfLayerNormGrad: dy and x differ in shape"));
    OP_REQUIRES(ctx, x.dims() >= 1, InvalidArgument("XlnetTfLayerNormGrad: x needs an axis"));
    const int64_t d = x.dim_size(x.dims() - 1);
    const int64_t rows = d == 0 ? 0 : x.NumElements() / d;
    OP_REQUIRES(ctx, gamma.NumElements() == d && mean.NumElements() == rows && rstd.NumElements() == rows,
                InvalidArgument("XlnetTfLayerNormGrad: gamma [D], mean and rstd [rows] expected"));
    Tensor *dx, *dgamma, *dbeta;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &dx));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, gamma.shape(), &dgamma));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, gamma.shape(), &dbeta));
    float* dgp = dgamma->flat<float>().data();
    float* dbp = dbeta->flat<float>().data();
    std::fill(dgp, dgp + d, 0.f);
    std::fill(dbp, dbp + d, 0.f);
    if (rows == 0) return;
    const T* dyp = dy.flat<T>().data();
    const T* xp = x.flat<T>().data();
    const float* gp = gamma.flat<float>().data();
    const float* mp = mean.flat<float>().data();
    const float* rp = rstd.flat<float>().data();
    T* dxp = dx->flat<T>().data();
    const int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
    std::vector<float> partial(static_cast<size_t>(blocks) * 2 * d, 0.f);  // per block: dgamma, dbeta
    const float inv_d = 1.f / static_cast<float>(d);
    auto work = [&](int64_t first_block, int64_t end_block) {
      std::vector<float> xhat(d), g(d);
      for (int64_t b = first_block; b < end_block; ++b) {
        float* pg = partial.data() + b * 2 * d;
        float* pb = pg + d;
        const int64_t end = std::min(rows, (b + 1) * kBlockRows);
        for (int64_t r = b * kBlockRows; r < end; ++r) {
          const T* dyr = dyp + r * d;
          const T* xr = xp + r * d;
          const float m = mp[r], s = rp[r];
          float sum_g = 0.f, sum_gx = 0.f;
#pragma omp simd reduction(+ : sum_g, sum_gx)
          for (int64_t j = 0; j < d; ++j) {
            const float dyj = Widen(dyr[j]);
            const float xh = (Widen(xr[j]) - m) * s;
            xhat[j] = xh;
            g[j] = dyj * gp[j];
            pg[j] += dyj * xh;
            pb[j] += dyj;
            sum_g += g[j];
            sum_gx += g[j] * xh;
          }
          const float mean_g = sum_g * inv_d, mean_gx = sum_gx * inv_d;
          T* dxr = dxp + r * d;
#pragma omp simd
          for (int64_t j = 0; j < d; ++j) {
            Narrow(s * (g[j] - mean_g - xhat[j] * mean_gx), &dxr[j]);
          }
        }
      }
    };
    auto* pool = ctx->device()->tensorflow_cpu_worker_threads();
    ::tensorflow::Shard(pool->num_threads, pool->workers, blocks, 12 * d * kBlockRows, work);
    for (int64_t b = 0; b < blocks; ++b) {  // in block order: deterministic
      const float* pg = partial.data() + b * 2 * d;
      const float* pb = pg + d;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) {
        dgp[j] += pg[j];
        dbp[j] += pb[j];
      }
    }
  }
};

::tensorflow::Status RowShapes(shape_inference::InferenceContext* c) {
  shape_inference::ShapeHandle x = c->input(0), rows;
  TF_RETURN_IF_ERROR(c->WithRankAtLeast(x, 1, &x));
  TF_RETURN_IF_ERROR(c->Subshape(x, 0, -1, &rows));
  c->set_output(0, x);
  c->set_output(1, rows);
  c->set_output(2, rows);
  return ::tensorflow::OkStatus();
}

::tensorflow::Status GradShapes(shape_inference::InferenceContext* c) {
  c->set_output(0, c->input(1));
  c->set_output(1, c->input(2));
  c->set_output(2, c->input(2));
  return ::tensorflow::OkStatus();
}

}  // namespace

REGISTER_OP("XlnetTfLayerNorm")
    .Input("x: T")
    .Input("gamma: float")
    .Input("beta: float")
    .Output("y: T")
    .Output("mean: float")
    .Output("rstd: float")
    .Attr("T: {bfloat16, float}")
    .Attr("epsilon: float")
    .SetShapeFn(RowShapes);

REGISTER_OP("XlnetTfLayerNormGrad")
    .Input("dy: T")
    .Input("x: T")
    .Input("gamma: float")
    .Input("mean: float")
    .Input("rstd: float")
    .Output("dx: T")
    .Output("dgamma: float")
    .Output("dbeta: float")
    .Attr("T: {bfloat16, float}")
    .SetShapeFn(GradShapes);

#define REGISTER(T)                                                                                    \
  REGISTER_KERNEL_BUILDER(Name("XlnetTfLayerNorm").Device(DEVICE_CPU).TypeConstraint<T>("T"),          \
                          LayerNormOp<T>);                                                             \
  REGISTER_KERNEL_BUILDER(Name("XlnetTfLayerNormGrad").Device(DEVICE_CPU).TypeConstraint<T>("T"),      \
                          LayerNormGradOp<T>);
REGISTER(float)
REGISTER(Eigen::bfloat16)
#undef REGISTER

}  // namespace xlnet_tf

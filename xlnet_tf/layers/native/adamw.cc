// The AdamW update of one weight in one pass over its elements, in place (a TensorFlow CPU op for
// training/optimization.XLNetAdamW).
//
// Per element, in float32 and in the order of XLNetAdamW.update_step's TensorFlow ops (each product and sum rounded
// as those ops round: built without contracting them into fused multiply-adds):
//   g = float(grad) * factor [* grad_multiplier]
//   m = beta_1 * m + one_minus_beta_1 * g;  v = beta_2 * v + one_minus_beta_2 * (g * g)
//   u = (m / c1) / (sqrt(v / c2) + eps)      adam_variant 0, "standard"
//     = (sqrt(c2) / c1) * m / (sqrt(v) + eps) adam_variant 1, "tf1"
//     = m / (sqrt(v) + eps)                   adam_variant 2, "no_bias_correction"
//   u += weight_decay * w (when decayed);  w -= lr * u;  copy = bfloat16(w) (when a copy is given)
// XlnetTfAdamW takes a dense gradient; XlnetTfAdamWRows the rows of a gathered table (distinct indices first, then
// padding slots with zero rows): every row's m and v decay, the given rows add their terms (what the dense update of
// the scattered gradient computes, without the dense gradient). A variable whose buffer another tensor still shares
// is copied first (as TensorFlow's own training ops do), so no earlier read of it changes.

#include <cmath>
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <vector>

#include "bfloat16_bits.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/work_sharder.h"

namespace xlnet_tf {
namespace {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Status;
using ::tensorflow::Tensor;
using ::tensorflow::Var;
using ::tensorflow::errors::InvalidArgument;

struct Settings {
  float beta_1, one_minus_beta_1, beta_2, one_minus_beta_2, epsilon, weight_decay, grad_multiplier;
  int variant;
  float factor, lr, c1, c2, tf1_step;
};

// One run of elements [begin, end): g_i = float(grad[i]) * factor * grad_multiplier (no grad: the moments decay), the update;
// branch-free inside (the variant, the decay and the copy are template arguments), so that the loops vectorize. In
// blocks of kBlock elements, the moments first, then the weights from the moments just written (still in L1): one
// loop over all nine streams ran at half the memory rate of XLA's separate passes here (4K aliasing of the
// equally aligned arrays).
constexpr int64_t kBlock = 1024;

template <int kVariant, bool kDecay, bool kCopy, typename T>
void UpdateRun(const T* grad, float* w, float* m, float* v, uint16_t* copy, int64_t begin, int64_t end,
               const Settings& s) {
  for (int64_t first = begin; first < end; first += kBlock) {
    const int64_t last = std::min(end, first + kBlock);
    if (grad == nullptr) {  // a table row without a gradient: its moments decay only (as the TensorFlow ops, -0 kept)
#pragma omp simd
      for (int64_t i = first; i < last; ++i) {
        m[i] = s.beta_1 * m[i];
        v[i] = s.beta_2 * v[i];
      }
    } else {
#pragma omp simd
      for (int64_t i = first; i < last; ++i) {
        const float g = Widen(grad[i - begin]) * s.factor * s.grad_multiplier;
        m[i] = s.beta_1 * m[i] + s.one_minus_beta_1 * g;
        v[i] = s.beta_2 * v[i] + s.one_minus_beta_2 * (g * g);
      }
    }
#pragma omp simd
    for (int64_t i = first; i < last; ++i) {
      float u;
      if (kVariant == 0) {
        u = (m[i] / s.c1) / (std::sqrt(v[i] / s.c2) + s.epsilon);
      } else if (kVariant == 1) {
        u = s.tf1_step * m[i] / (std::sqrt(v[i]) + s.epsilon);
      } else {
        u = m[i] / (std::sqrt(v[i]) + s.epsilon);
      }
      if (kDecay) u = u + s.weight_decay * w[i];
      const float w_t = w[i] - s.lr * u;
      w[i] = w_t;
      if (kCopy) copy[i] = RoundToBfloat16(w_t);
    }
  }
}

// UpdateRun with its template arguments from the settings (grad: the run's first gradient, or nullptr for zeros).
template <typename T>
void Update(const T* grad, float* w, float* m, float* v, uint16_t* copy, int64_t begin, int64_t end,
            const Settings& s) {
  const bool decay = s.weight_decay != 0.f, has_copy = copy != nullptr;
#define XLNET_TF_RUN(V)                                                                                 \
  if (decay && has_copy) UpdateRun<V, true, true>(grad, w, m, v, copy, begin, end, s);                 \
  else if (decay) UpdateRun<V, true, false>(grad, w, m, v, copy, begin, end, s);                       \
  else if (has_copy) UpdateRun<V, false, true>(grad, w, m, v, copy, begin, end, s);                    \
  else UpdateRun<V, false, false>(grad, w, m, v, copy, begin, end, s);
  if (s.variant == 0) {
    XLNET_TF_RUN(0)
  } else if (s.variant == 1) {
    XLNET_TF_RUN(1)
  } else {
    XLNET_TF_RUN(2)
  }
#undef XLNET_TF_RUN
}

// The variable's tensor, copied first when another tensor shares its buffer.
Status Exclusive(OpKernelContext* ctx, Var* var, Tensor** out) {
  Tensor* t = var->tensor();
  if (!t->IsInitialized()) return InvalidArgument("XlnetTfAdamW: a variable is not initialized");
  if (!t->RefCountIsOne()) {
    Tensor fresh;
    TF_RETURN_IF_ERROR(ctx->allocate_temp(t->dtype(), t->shape(), &fresh));
    std::memcpy(fresh.data(), t->data(), t->TotalBytes());
    *t = fresh;
  }
  *out = t;
  return ::tensorflow::OkStatus();
}

class AdamWBase : public OpKernel {
 public:
  explicit AdamWBase(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("beta_1", &s_.beta_1));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("one_minus_beta_1", &s_.one_minus_beta_1));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("beta_2", &s_.beta_2));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("one_minus_beta_2", &s_.one_minus_beta_2));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("epsilon", &s_.epsilon));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("weight_decay", &s_.weight_decay));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("grad_multiplier", &s_.grad_multiplier));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("adam_variant", &s_.variant));
    OP_REQUIRES(ctx, s_.variant >= 0 && s_.variant <= 2, InvalidArgument("XlnetTfAdamW: adam_variant 0, 1 or 2"));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_copies", &num_copies_));
  }

 protected:
  // Looks up and locks var, m, v (inputs 0-2) and the copy (the last input, when given); runs
  // body(settings, w, m, v, copy or nullptr, n) with the scalars of inputs first_scalar.. (factor, lr, c1, c2).
  template <typename Body>
  void Run(OpKernelContext* ctx, int first_scalar, Body body) {
    Settings s = s_;
    const float* scalars[4];
    for (int i = 0; i < 4; ++i) {
      const Tensor& t = ctx->input(first_scalar + i);
      OP_REQUIRES(ctx, t.NumElements() == 1 && t.dtype() == ::tensorflow::DT_FLOAT,
                  InvalidArgument("XlnetTfAdamW: factor, lr, c1 and c2 must be float32 scalars"));
      scalars[i] = t.flat<float>().data();
    }
    s.factor = *scalars[0];
    s.lr = *scalars[1];
    s.c1 = *scalars[2];
    s.c2 = *scalars[3];
    s.tf1_step = std::sqrt(s.c2) / s.c1;
    std::vector<::tensorflow::core::RefCountPtr<Var>> vars(3 + num_copies_);
    for (int i = 0; i < 3 + num_copies_; ++i) {
      const int input = i < 3 ? i : ctx->num_inputs() - 1;
      OP_REQUIRES_OK(ctx, ::tensorflow::LookupResource(ctx, ::tensorflow::HandleFromInput(ctx, input), &vars[i]));
    }
    for (size_t i = 0; i < vars.size(); ++i) {  // (locking one variable twice would wait forever)
      for (size_t j = 0; j < i; ++j) {
        OP_REQUIRES(ctx, vars[i].get() != vars[j].get(),
                    InvalidArgument("XlnetTfAdamW: the variable, its moments and its copy must be four variables"));
      }
    }
    std::vector<std::unique_ptr<::tensorflow::mutex_lock>> locks;
    for (auto& var : vars) locks.emplace_back(new ::tensorflow::mutex_lock{*var->mu()});
    Tensor *w, *m, *v, *copy = nullptr;
    OP_REQUIRES_OK(ctx, Exclusive(ctx, vars[0].get(), &w));
    OP_REQUIRES_OK(ctx, Exclusive(ctx, vars[1].get(), &m));
    OP_REQUIRES_OK(ctx, Exclusive(ctx, vars[2].get(), &v));
    OP_REQUIRES(ctx, w->dtype() == ::tensorflow::DT_FLOAT && m->dtype() == ::tensorflow::DT_FLOAT &&
                         v->dtype() == ::tensorflow::DT_FLOAT,
                InvalidArgument("XlnetTfAdamW: the variable and its moments must be float32"));
    OP_REQUIRES(ctx, w->shape() == m->shape() && w->shape() == v->shape(),
                InvalidArgument("XlnetTfAdamW: the moments must have the variable's shape"));
    if (num_copies_ == 1) {
      OP_REQUIRES_OK(ctx, Exclusive(ctx, vars[3].get(), &copy));
      OP_REQUIRES(ctx, copy->dtype() == ::tensorflow::DT_BFLOAT16 && copy->shape() == w->shape(),
                  InvalidArgument("XlnetTfAdamW: the copy must be bfloat16 of the variable's shape"));
    }
    body(s, w->flat<float>().data(), m->flat<float>().data(), v->flat<float>().data(),
         copy == nullptr ? nullptr : reinterpret_cast<uint16_t*>(copy->data()), w->NumElements(), w->shape());
  }

  Settings s_;
  int num_copies_;
};

template <typename T>
class AdamWOp : public AdamWBase {
 public:
  using AdamWBase::AdamWBase;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& grad = ctx->input(3);
    Run(ctx, 4, [&](const Settings& s, float* w, float* m, float* v, uint16_t* copy, int64_t n,
                    const ::tensorflow::TensorShape& shape) {
      OP_REQUIRES(ctx, grad.shape() == shape, InvalidArgument("XlnetTfAdamW: the gradient must have the variable's "
                                                              "shape ", shape.DebugString(), ", got ",
                                                              grad.shape().DebugString()));
      const T* g = grad.flat<T>().data();
      auto work = [&](int64_t begin, int64_t end) { Update(g + begin, w, m, v, copy, begin, end, s); };
      auto* pool = ctx->device()->tensorflow_cpu_worker_threads();
      ::tensorflow::Shard(pool->num_threads, pool->workers, n, 40, work);  // (cost per element)
    });
  }
};

template <typename Index>
class AdamWRowsOp : public AdamWBase {
 public:
  using AdamWBase::AdamWBase;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& indices = ctx->input(3);
    const Tensor& rows = ctx->input(4);
    Run(ctx, 5, [&](const Settings& s, float* w, float* m, float* v, uint16_t* copy, int64_t n,
                    const ::tensorflow::TensorShape& shape) {
      OP_REQUIRES(ctx, shape.dims() >= 1 && indices.dims() == 1 && rows.dims() == shape.dims() &&
                           rows.dim_size(0) == indices.dim_size(0) && rows.dtype() == ::tensorflow::DT_FLOAT,
                  InvalidArgument("XlnetTfAdamWRows: indices [n] and float32 rows [n, ...] of the table's rows"));
      const int64_t table_rows = shape.dim_size(0);
      const int64_t width = table_rows == 0 ? 0 : n / table_rows;
      OP_REQUIRES(ctx, rows.NumElements() == indices.dim_size(0) * width,
                  InvalidArgument("XlnetTfAdamWRows: rows must be [n, ...] of the table's row shape"));
      const Index* idx = indices.flat<Index>().data();
      std::vector<int32_t> slot(table_rows, -1);  // table row -> its slot in rows (the first: padding slots after)
      for (int64_t k = 0; k < indices.dim_size(0); ++k) {
        const Index r = idx[k];
        OP_REQUIRES(ctx, r >= 0 && r < table_rows, InvalidArgument("XlnetTfAdamWRows: index ", r, " out of range"));
        if (slot[r] < 0) slot[r] = static_cast<int32_t>(k);
      }
      const float* given = rows.flat<float>().data();
      auto work = [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const float* row = slot[r] < 0 ? nullptr : given + slot[r] * width;
          Update(row, w, m, v, copy, r * width, (r + 1) * width, s);
        }
      };
      auto* pool = ctx->device()->tensorflow_cpu_worker_threads();
      ::tensorflow::Shard(pool->num_threads, pool->workers, table_rows, 40 * width, work);
    });
  }
};

#define ADAMW_ATTRS                               \
  .Attr("beta_1: float")                          \
      .Attr("one_minus_beta_1: float")            \
      .Attr("beta_2: float")                      \
      .Attr("one_minus_beta_2: float")            \
      .Attr("epsilon: float")                     \
      .Attr("weight_decay: float")                \
      .Attr("grad_multiplier: float = 1.0")       \
      .Attr("adam_variant: int")                  \
      .Attr("num_copies: int >= 0 = 0")           \
      .Input("factor: float")                     \
      .Input("lr: float")                         \
      .Input("c1: float")                         \
      .Input("c2: float")                         \
      .Input("copy: num_copies * resource")       \
      .SetShapeFn(::tensorflow::shape_inference::NoOutputs)

}  // namespace

REGISTER_OP("XlnetTfAdamW")
    .Input("var: resource")
    .Input("m: resource")
    .Input("v: resource")
    .Input("grad: T")
    .Attr("T: {bfloat16, float}") ADAMW_ATTRS;

REGISTER_OP("XlnetTfAdamWRows")
    .Input("var: resource")
    .Input("m: resource")
    .Input("v: resource")
    .Input("indices: Tindices")
    .Input("rows: float")
    .Attr("Tindices: {int32, int64}") ADAMW_ATTRS;

REGISTER_KERNEL_BUILDER(Name("XlnetTfAdamW").Device(DEVICE_CPU).TypeConstraint<float>("T"), AdamWOp<float>);
REGISTER_KERNEL_BUILDER(Name("XlnetTfAdamW").Device(DEVICE_CPU).TypeConstraint<Eigen::bfloat16>("T"),
                        AdamWOp<Eigen::bfloat16>);
REGISTER_KERNEL_BUILDER(Name("XlnetTfAdamWRows").Device(DEVICE_CPU).TypeConstraint<int32_t>("Tindices"),
                        AdamWRowsOp<int32_t>);
REGISTER_KERNEL_BUILDER(Name("XlnetTfAdamWRows").Device(DEVICE_CPU).TypeConstraint<int64_t>("Tindices"),
                        AdamWRowsOp<int64_t>);

}  // namespace xlnet_tf

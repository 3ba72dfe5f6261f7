// The Autograd kernels of gemm_ladder::mm and gemm_ladder::linear: a torch::autograd::Function per
// op, so that a call with something to record runs no Python (and one with nothing to record goes
// straight below autograd). The backward computes exactly what gemm_ladder/ops.py's _mm_backward and
// _linear_backward compute: its GEMMs are the gemm_ladder ops, called through the dispatcher (so a
// double backward records them too), the activations' derivatives torch's own kernels.
#include <torch/extension.h>
#include <torch/library.h>

#include <ATen/core/dispatch/Dispatcher.h>

namespace gl_host {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using Tensor = at::Tensor;
using OptTensor = std::optional<at::Tensor>;
using OptDtype = std::optional<at::ScalarType>;
using OptStr = std::optional<c10::string_view>;

static Tensor call_mm(const Tensor& a, const Tensor& b, OptDtype out_dtype) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("gemm_ladder::mm", "")
                       .typed<Tensor(const Tensor&, const Tensor&, OptDtype)>();
  return op.call(a, b, out_dtype);
}

static Tensor call_linear(const Tensor& x, const Tensor& w, const OptTensor& bias, const OptTensor& residual,
                          OptStr activation, double alpha, double beta, OptDtype out_dtype) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("gemm_ladder::linear", "")
                       .typed<Tensor(const Tensor&, const Tensor&, const OptTensor&, const OptTensor&, OptStr, double,
                                     double, OptDtype)>();
  return op.call(x, w, bias, residual, activation, alpha, beta, out_dtype);
}

// The incoming gradient in the operands' dtype: the kernels take bf16/fp16 operands, so the gradient
// of an out_dtype=float32 output is rounded to the inputs' dtype before its GEMMs.
static Tensor in_dtype(const Tensor& g, at::ScalarType dtype) { return g.scalar_type() == dtype ? g : g.to(dtype); }

struct MmFunction : public torch::autograd::Function<MmFunction> {
  static Tensor forward(AutogradContext* ctx, const Tensor& a, const Tensor& b, OptDtype out_dtype) {
    // Each operand is kept only for the other's gradient.
    ctx->save_for_backward({b.requires_grad() ? a : Tensor(), a.requires_grad() ? b : Tensor()});
    at::AutoDispatchBelowADInplaceOrView guard;
    return call_mm(a, b, out_dtype);
  }

  // c = a @ b: grad_a = grad @ b.T, grad_b = a.T @ grad (transposed views: no copies).
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const Tensor& a = saved[0];
    const Tensor& b = saved[1];
    Tensor g = in_dtype(grads[0], (a.defined() ? a : b).scalar_type());
    Tensor grad_a = ctx->needs_input_grad(0) ? call_mm(g, b.t(), std::nullopt) : Tensor();
    Tensor grad_b = ctx->needs_input_grad(1) ? call_mm(a.t(), g, std::nullopt) : Tensor();
    return {grad_a, grad_b, Tensor()};
  }
};

struct LinearFunction : public torch::autograd::Function<LinearFunction> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& w, const OptTensor& bias,
                        const OptTensor& residual, OptStr activation, double alpha, double beta, OptDtype out_dtype) {
    ctx->saved_data["activation"] =
        activation.has_value() ? std::string(activation->data(), activation->size()) : std::string();
    ctx->saved_data["alpha"] = alpha;
    ctx->saved_data["beta"] = beta;
    ctx->saved_data["residual_dtype"] =
        static_cast<int64_t>(residual.has_value() && residual->defined() ? residual->scalar_type() : x.scalar_type());
    // An absent optional tensor is no input edge: the edges are x, w, then bias and residual if given.
    const bool has_bias = bias.has_value() && bias->defined();
    const bool has_residual = residual.has_value() && residual->defined();
    ctx->saved_data["bias_edge"] = has_bias ? int64_t(2) : int64_t(-1);
    ctx->saved_data["residual_edge"] = has_residual ? int64_t(2 + has_bias) : int64_t(-1);
    ctx->save_for_backward({x, w, has_bias ? *bias : Tensor()});
    at::AutoDispatchBelowADInplaceOrView guard;
    return call_linear(x, w, bias, residual, activation, alpha, beta, out_dtype);
  }

  // y = act(z) + beta * residual, z = alpha * x @ w.T + bias, over the (M, K) rows of x:
  // grad_residual = beta * grad; grad_z = grad * act'(z) (z recomputed by the linear op without the
  // activation and the residual); grad_bias = grad_z summed over rows in fp32; grad_x = alpha *
  // grad_z @ w; grad_w = alpha * grad_z^T @ x.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const Tensor& x = saved[0];
    const Tensor& w = saved[1];
    const Tensor& bias = saved[2];
    const std::string act = ctx->saved_data["activation"].toStringRef();
    const double alpha = ctx->saved_data["alpha"].toDouble();
    const double beta = ctx->saved_data["beta"].toDouble();
    const auto residual_dtype = static_cast<at::ScalarType>(ctx->saved_data["residual_dtype"].toInt());
    // Symbolic sizes: under torch.compile(dynamic=True) a plain size would specialise the shape.
    const c10::SymInt n = w.sym_size(0), k = w.sym_size(1);
    const int64_t bias_edge = ctx->saved_data["bias_edge"].toInt();
    const int64_t residual_edge = ctx->saved_data["residual_edge"].toInt();
    const Tensor& grad = grads[0];
    Tensor grad_res = residual_edge >= 0 && ctx->needs_input_grad(residual_edge) ? (grad * beta).to(residual_dtype)
                                                                                : Tensor();
    Tensor g = in_dtype(grad, x.scalar_type());
    if (!act.empty()) {
      OptTensor b = bias.defined() ? OptTensor(bias.detach()) : std::nullopt;
      Tensor z = call_linear(x.detach(), w.detach(), b, std::nullopt, std::nullopt, alpha, 1.0, std::nullopt);
      if (act == "relu") {
        g = at::threshold_backward(g, z, 0);
      } else if (act == "gelu") {
        g = at::gelu_backward(g, z, "none");
      } else if (act == "gelu_tanh") {
        g = at::gelu_backward(g, z, "tanh");
      } else if (act == "silu") {
        g = at::silu_backward(g, z);
      } else {
        TORCH_CHECK(false, "gemm_ladder::linear backward: unknown activation ", act);
      }
    }
    // Not {-1, n}: N or K = 0 leaves -1 undetermined; M is the product of x's batch dimensions.
    c10::SymInt m = 1;
    for (int64_t d = 0; d + 1 < x.dim(); ++d) m *= x.sym_size(d);
    Tensor g2 = g.reshape_symint({m, n});
    Tensor grad_bias;
    if (bias_edge >= 0 && ctx->needs_input_grad(bias_edge)) {
      grad_bias = g2.sum(0, false, at::kFloat).to(bias.scalar_type());
    }
    Tensor grad_x, grad_w;
    if (ctx->needs_input_grad(0)) {
      grad_x = call_mm(g2, w, std::nullopt);
      if (alpha != 1.0) grad_x = grad_x * alpha;
      grad_x = grad_x.view_symint(x.sym_sizes());
    }
    if (ctx->needs_input_grad(1)) {
      grad_w = call_mm(g2.t(), x.reshape_symint({m, k}), std::nullopt);
      if (alpha != 1.0) grad_w = grad_w * alpha;
    }
    return {grad_x, grad_w, grad_bias, grad_res, Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

// Whether a call has something for autograd to record. Without (grad mode off, or no input that
// requires grad: inference with Parameters under no_grad) the call goes below autograd at once:
// Function::apply would still make a node, copy the inputs' metadata and fill its saved data.
static bool recording(const Tensor& a, const Tensor& b, const OptTensor& c = std::nullopt,
                      const OptTensor& d = std::nullopt) {
  if (!at::GradMode::is_enabled()) return false;
  auto needs = [](const OptTensor& t) { return t.has_value() && t->defined() && t->requires_grad(); };
  return a.requires_grad() || b.requires_grad() || needs(c) || needs(d);
}

Tensor mm_autograd(const Tensor& a, const Tensor& b, OptDtype out_dtype) {
  if (!recording(a, b)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return call_mm(a, b, out_dtype);
  }
  return MmFunction::apply(a, b, out_dtype);
}

Tensor linear_autograd(const Tensor& x, const Tensor& w, const OptTensor& bias, const OptTensor& residual,
                       OptStr activation, double alpha, double beta, OptDtype out_dtype) {
  if (!recording(x, w, bias, residual)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return call_linear(x, w, bias, residual, activation, alpha, beta, out_dtype);
  }
  return LinearFunction::apply(x, w, bias, residual, activation, alpha, beta, out_dtype);
}

// The ops called from Python without the OpOverload's boxed argument parsing (a typed dispatcher
// call from the top: autograd, FakeTensor and every other key still see it). api.mm / api.linear use
// these on eager calls (torch.compile traces the OpOverload instead).
Tensor mm_entry(const Tensor& a, const Tensor& b, OptDtype out_dtype) { return call_mm(a, b, out_dtype); }

Tensor linear_entry(const Tensor& x, const Tensor& w, const OptTensor& bias, const OptTensor& residual,
                    std::optional<std::string> activation, double alpha, double beta, OptDtype out_dtype) {
  OptStr act;
  if (activation.has_value()) act = c10::string_view(activation->data(), activation->size());
  return call_linear(x, w, bias, residual, act, alpha, beta, out_dtype);
}

static std::unique_ptr<torch::Library> autograd_lib;

// Registers the Autograd kernels (after Python removed its own); unregister_autograd removes them.
void register_autograd() {
  if (autograd_lib) return;
  autograd_lib = std::make_unique<torch::Library>(torch::Library::IMPL, "gemm_ladder", c10::DispatchKey::Autograd,
                                                  __FILE__, __LINE__);
  autograd_lib->impl("mm", TORCH_FN(mm_autograd));
  autograd_lib->impl("linear", TORCH_FN(linear_autograd));
}

void unregister_autograd() { autograd_lib.reset(); }

}  // namespace gl_host

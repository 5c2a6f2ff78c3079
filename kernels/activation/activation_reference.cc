// Scalar reference activations: each formula evaluated in double with the C
// library's functions (erfc, exp, tanh are correctly rounded to within an ulp of
// double), then rounded once to float32. Close to exact, so it judges the float32
// fast kernels; simple enough to be obviously right.
//
// Only PyTorch's handling of non-finite values is copied, not its float32 rounding:
// where float32 exp(-x) overflows (x < -88.7), PyTorch's silu(x) is -0 while the
// true value (kept here) is a tiny negative number, e.g. -4e-37 at x = -90.
#include <cmath>

#include "kernels/activation/activation.h"

namespace layerserve::kernels {
namespace {

constexpr double kSqrtHalf = 0.70710678118654752440;       // 1/sqrt(2)
constexpr double kSqrtTwoOverPi = 0.79788456080286535588;  // sqrt(2/pi)

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

double Evaluate(Activation act, double x) {
  switch (act) {
    case Activation::kRelu:
      return x < 0 ? 0.0 : x;  // NaN and -0 pass through, as torch.relu.
    case Activation::kGelu:
      // erfc(-x/sqrt2)/2 = Phi(x) without the cancellation of 1 + erf for x < 0.
      return x * 0.5 * std::erfc(-x * kSqrtHalf);
    case Activation::kGeluTanh:
      // 0.5 x (1 + tanh(z)) = x sigmoid(2z): the same value, without the
      // cancellation of 1 + tanh(z) (for x < -5, 1 + tanh is below double's ulp
      // of 1 and the product loses every digit).
      return x * Sigmoid(2.0 * kSqrtTwoOverPi * (x + 0.044715 * x * x * x));
    case Activation::kSilu:
      return x * Sigmoid(x);  // -inf * 0 = NaN, as PyTorch.
    case Activation::kSigmoid:
      return Sigmoid(x);
    case Activation::kTanh:
      return std::tanh(x);
    case Activation::kQuickGelu:
      return x * Sigmoid(1.702 * x);
  }
  return std::nan("");
}

}  // namespace

const char* ActivationName(Activation act) {
  switch (act) {
    case Activation::kRelu:
      return "Relu";
    case Activation::kGelu:
      return "Gelu";
    case Activation::kGeluTanh:
      return "GeluTanh";
    case Activation::kSilu:
      return "Silu";
    case Activation::kSigmoid:
      return "Sigmoid";
    case Activation::kTanh:
      return "Tanh";
    case Activation::kQuickGelu:
      return "QuickGelu";
  }
  return "?";
}

void ActivateReference(Activation act, const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(Evaluate(act, x[i]));
}

void GatedActivateReference(Activation act, const float* gate, const float* up,
                            int64_t rows, int64_t dim, int64_t stride, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gate + r * stride;
    const float* u = up + r * stride;
    float* y_row = y + r * dim;
    for (int64_t i = 0; i < dim; ++i) {
      // act(gate) rounded to float32, then a float32 product, as PyTorch computes
      // F.silu(gate) * up.
      y_row[i] = static_cast<float>(Evaluate(act, g[i])) * u[i];
    }
  }
}

}  // namespace layerserve::kernels

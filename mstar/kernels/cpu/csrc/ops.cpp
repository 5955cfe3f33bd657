// The native CPU ops (torch.ops.mstar_cpu): the weight-only quantized and bf16-weight linears, and
// the fused per-token ops, paged decode attention and whole decoder layers (the headers below).
//
// Weight-only quantized linear layers for CPU: y = x @ dequantize(W)^T, x and y float32.
//
// x is quantized to int16 per block of 32 (qdot.h) and multiplied with the weights in integer
// arithmetic, the output rows split over the threads. Every op takes `level` (-1: the CPU's best;
// tests force each level the CPU has, cpu_level.h). The earlier kernels that dequantized W to float32 (in
// registers, or through k-major panels for larger batches) were 1.6-2.8x slower at every batch
// size from 1 to 512 on AVX2 and are gone (docs/engine.rst).
//
// q4: GGUF Q4_1 blocks of 20 bytes per 32 weights: fp16 scale d, fp16 minimum m, 16 bytes of
//     nibbles (byte j holds weight j in its low nibble and weight j + 16 in its high nibble);
//     weight = q * d + m; repacked at load so that 8 output rows are interleaved per block
//     (q4_layout.h): every q4 op here takes that layout, [N, K / 32 * 20] bytes as before.
// int8: int8 weights [N, K] with float32 scales [N, G], one per group of K / G weights.
#include <omp.h>
#include <sched.h>

#include "activation_ops.h"
#include "argmax_ops.h"
#include "common.h"
#include "kv_cache_ops.h"
#include "norm_ops.h"
#include "qdot.h"
#include "bf16_linear.h"
#include "rope_ops.h"
#include "weight_checks.h"
#include "dequant_gemm.h"
#include "decode_attention.h"
#include "lora_ops.h"

namespace {

constexpr int64_t kRowGrain = 16;  // output rows per parallel work item, at least
static_assert(kRowGrain % kGroupRows == 0, "work items start at a q4 group");


// x quantized per block of 32: (q int16 [M, K], d [M, K / 32], s [M, K / 32]).
std::tuple<at::Tensor, at::Tensor, at::Tensor> quantize_activations(const at::Tensor& x_in, int64_t level) {
  at::Tensor x = x_in.contiguous();
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.size(1) % kQ4Block == 0,
              "x must be float32 [M, K] with K divisible by 32");
  const int64_t M = x.size(0), K = x.size(1);
  at::Tensor q = at::empty({M, K}, x.options().dtype(at::kShort));
  at::Tensor d = at::empty({M, K / kQ4Block}, x.options()), s = at::empty_like(d);
  qdot_level(resolve_level(level)).quantize(x.data_ptr<float>(), M, K, q.data_ptr<int16_t>(),
                                            d.data_ptr<float>(), s.data_ptr<float>());
  return {q, d, s};
}

// Quantizes x, then `rows(activations, begin, end, out)` fills output columns [begin, end).
template <typename Rows>
at::Tensor qdot_linear(const at::Tensor& x, int64_t N, int64_t level, Rows rows) {
  const auto [q, d, s] = quantize_activations(x, level);
  const Activations a{q.data_ptr<int16_t>(), d.data_ptr<float>(), s.data_ptr<float>(), x.size(0), x.size(1)};
  at::Tensor out = at::empty({x.size(0), N}, x.options());
  float* op = out.data_ptr<float>();
  // work items of kRowGrain columns, so that every thread's 8-column panels (qdot_kernel.h) are full
  at::parallel_for(0, (N + kRowGrain - 1) / kRowGrain, 1, [&](int64_t begin, int64_t end) {
    rows(a, begin * kRowGrain, std::min(end * kRowGrain, N), op);
  });
  return out;
}

at::Tensor q4_linear(const at::Tensor& x, const at::Tensor& blocks, int64_t K, int64_t level) {
  check_q4(blocks, K);
  check_input(x, K);
  const QdotLevel fns = qdot_level(resolve_level(level));
  const uint8_t* bp = blocks.data_ptr<uint8_t>();
  const int64_t N = blocks.size(0);
  return qdot_linear(x, N, level, [&](const Activations& a, int64_t begin, int64_t end, float* op) {
    fns.q4_rows(a, bp, begin, end, op, N);
  });
}

at::Tensor int8_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& scales, int64_t level) {
  check_int8(weight, scales);
  const int64_t N = weight.size(0), K = weight.size(1), groups = scales.size(1);
  check_input(x, K);
  const QdotLevel fns = qdot_level(resolve_level(level));
  const int8_t* wp = weight.data_ptr<int8_t>();
  const float* sp = scales.data_ptr<float>();
  return qdot_linear(x, N, level, [&](const Activations& a, int64_t begin, int64_t end, float* op) {
    fns.int8_rows(a, wp, sp, groups, begin, end, op, N);
  });
}

int64_t best_level() { return cpu_level(); }

int64_t features() { return cpu_features(); }

// Binds the intra-op threads of the calling thread's OpenMP team one per CPU: thread i to cpus[i],
// for a team of cpus.size() threads (the caller sets torch's thread count to that first, so that
// every later region, torch's and ours, runs on this team). Returns how many threads bound.
int64_t bind_threads(at::IntArrayRef cpus) {
  const std::vector<int64_t> list(cpus.begin(), cpus.end());
  int64_t bound = 0;
#pragma omp parallel num_threads(static_cast<int>(list.size())) reduction(+ : bound)
  {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(static_cast<int>(list[omp_get_thread_num()]), &set);
    bound += sched_setaffinity(0, sizeof(set), &set) == 0 ? 1 : 0;
  }
  return bound;
}


}  // namespace

#include "decode_layers.h"  // decode_layer.h calls q4_linear and int8_linear above

TORCH_LIBRARY(mstar_cpu, m) {
  m.def("q4_linear(Tensor x, Tensor blocks, int in_features, int level=-1) -> Tensor");
  m.def("int8_linear(Tensor x, Tensor weight, Tensor scales, int level=-1) -> Tensor");
  m.def("quantize_activations(Tensor x, int level=-1) -> (Tensor, Tensor, Tensor)");
  m.def("lora_delta(Tensor(a!) out, Tensor x, Tensor a, Tensor b, Tensor spans, Tensor widths, Tensor order, "
        "Tensor starts, Tensor group_slots) -> ()");
  m.def("cpu_level() -> int");
  m.def("cpu_features() -> int");
  m.def("level_features(int level) -> int");
  m.def("bf16_linear(Tensor x, Tensor weight, Tensor? bias=None, int level=-1) -> Tensor");
  m.def("rms_norm(Tensor x, Tensor weight, float eps, bool offset) -> Tensor");
  m.def("rms_norm_inplace(Tensor(a!) x, Tensor weight, float eps, bool offset) -> ()");
  m.def("fused_add_rms_norm(Tensor(a!) x, Tensor(b!) residual, Tensor weight, float eps, bool offset) -> ()");
  m.def("silu_and_mul(Tensor x) -> Tensor");
  m.def("gelu_tanh_and_mul(Tensor x) -> Tensor");
  m.def("rotary_embedding(Tensor(a!) x, Tensor cos, Tensor sin) -> ()");
  m.def("write_kv_cache(Tensor(a!) kv_cache, Tensor k, Tensor v, Tensor slot_mapping) -> ()");
  m.def("greedy_argmax(Tensor logits) -> Tensor");
  m.def("q4_linear_wide(Tensor x, Tensor blocks, int in_features, int level=-1) -> Tensor");
  m.def("int8_linear_wide(Tensor x, Tensor weight, Tensor scales, int level=-1) -> Tensor");
  m.def("quant_wide_rows(bool q4, int level=-1) -> int");
  m.def("bind_threads(int[] cpus) -> int");
  m.def("paged_decode_attention(Tensor q, Tensor kv_cache, Tensor block_tables, Tensor context_lens, int? window, "
        "float scale) -> Tensor");
  m.def("decode_layer(Tensor(a!) hidden, Tensor(b!) residual, bool normed, Tensor input_norm, Tensor post_norm, "
        "float eps, int[] kinds, Tensor[] weights, int[] in_features, Tensor cos, Tensor sin, Tensor(c!) kv_cache, "
        "Tensor slot_mapping, Tensor block_tables, Tensor context_lens, int? window, float scale, int num_heads, "
        "int num_kv_heads) -> Tensor");
  m.class_<DecodeStack>("DecodeStack")
      .def(torch::init<std::vector<at::Tensor>, std::vector<int64_t>, std::vector<at::Tensor>, std::vector<int64_t>,
                       std::vector<at::Tensor>, std::vector<int64_t>, std::vector<double>, double, int64_t, int64_t>());
  m.def("decode_stack(__torch__.torch.classes.mstar_cpu.DecodeStack stack, Tensor(a!) hidden, Tensor cos, "
        "Tensor sin, Tensor slot_mapping, Tensor block_tables, Tensor context_lens) -> Tensor");
}

TORCH_LIBRARY_IMPL(mstar_cpu, CPU, m) {
  m.impl("q4_linear", &q4_linear);
  m.impl("int8_linear", &int8_linear);
  m.impl("quantize_activations", &quantize_activations);
  m.impl("bf16_linear", &bf16_linear);
  m.impl("rms_norm", &rms_norm);
  m.impl("rms_norm_inplace", &rms_norm_inplace);
  m.impl("fused_add_rms_norm", &fused_add_rms_norm);
  m.impl("silu_and_mul", &silu_and_mul);
  m.impl("gelu_tanh_and_mul", &gelu_tanh_and_mul);
  m.impl("rotary_embedding", &rotary_embedding);
  m.impl("write_kv_cache", &write_kv_cache);
  m.impl("greedy_argmax", &greedy_argmax);
  m.impl("lora_delta", &lora_delta);
  m.impl("q4_linear_wide", &q4_linear_wide);
  m.impl("int8_linear_wide", &int8_linear_wide);
  m.impl("paged_decode_attention", &paged_decode_attention);
  m.impl("decode_layer", &decode_layer);
  m.impl("decode_stack", &decode_stack);
}

TORCH_LIBRARY_IMPL(mstar_cpu, CompositeExplicitAutograd, m) {
  m.impl("cpu_level", &best_level);
  m.impl("cpu_features", &features);
  m.impl("level_features", &level_features);
  m.impl("quant_wide_rows", &wide_rows);
  m.impl("bind_threads", &bind_threads);
}

// kv_row_kernels: the level's quantized KV row kernels (cpu/ops/levels/<level>/kv_rows.cpp,
// OpKernels::kv_rows).
#include "cpu/ops/kv_rows.hpp"

#include "common/fail.hpp"
#include "cpu/kernels/op_kernels.hpp"

namespace ember::cpu {

KvRowKernels kv_row_kernels(Isa isa, quant::DType type) {
  if (const KvRowKernels* kernels = op_kernels(isa).kv_rows(type)) return *kernels;
  fail(ErrorCode::unsupported, "kv_row_kernels: {} is not a quantized KV type", quant::type_name(type));
}

}  // namespace ember::cpu

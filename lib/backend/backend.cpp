#include "backend/backend.hpp"

namespace ember::backend {

bool Backend::supports(Op op, DType type) const {
  switch (op) {
    case Op::get_rows:
    case Op::matmul:
      return quant::type_info(type).weight_supported;
    case Op::copy_rows:
      return true;  // bytes, whatever they hold
    case Op::kv_store:
    case Op::kv_load:
    case Op::attention:
      return quant::is_kv_storage_type(type);
    default:
      return type == DType::f32;
  }
}

}  // namespace ember::backend

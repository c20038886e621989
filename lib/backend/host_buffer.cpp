#include "backend/host_buffer.hpp"

#include <cstdlib>
#include <new>

#include "common/fail.hpp"

namespace ember::backend {

HostBuffer::HostBuffer(size_t bytes) : size_(bytes) {
  constexpr size_t kAlign = 64;
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  data_ = static_cast<std::byte*>(std::aligned_alloc(kAlign, rounded == 0 ? kAlign : rounded));
  if (!data_) fail(ErrorCode::out_of_memory, "cannot allocate {} bytes of host memory", bytes);
}

HostBuffer::~HostBuffer() { std::free(data_); }

}  // namespace ember::backend

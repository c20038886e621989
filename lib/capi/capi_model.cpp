// C API: models (load, info) and the tokenizer facade.
#include "capi/capi.hpp"
#include "common/fail.hpp"

using namespace ember;
using capi::guard;
using capi::require_arg;

namespace {

ModelOptions to_cpp(const ember_model_options* in) {
  const ember_model_options o = capi::read_versioned(in, ember_model_default_options(), "ember_model_options");
  ModelOptions m;
  m.threads = o.threads;
  m.use_mmap = o.use_mmap != 0;
  m.vocab_only = o.vocab_only != 0;
  m.kv_page_tokens = o.kv_page_tokens;
  m.kv_pool_tokens = o.kv_pool_tokens;
  m.kv_memory_budget = size_t(o.kv_memory_budget);
  if (o.log) {
    m.log = [fn = o.log, user = o.log_user](LogLevel level, std::string_view message) {
      fn(static_cast<ember_log_level>(level), message.data(), message.size(), user);
    };
  }
  if (o.progress) m.progress = [fn = o.progress, user = o.progress_user](float f) { return fn(f, user) != 0; };
  return m;
}

ember_status hand_out(std::shared_ptr<Model> model, ember_model** out) {
  *out = new ember_model{std::move(model)};
  return EMBER_OK;
}

}  // namespace

extern "C" {

void ember_model_options_init(ember_model_options* out, size_t size) {
  const ModelOptions d;
  ember_model_options o{};
  o.struct_size = sizeof(o);
  o.threads = d.threads;
  o.use_mmap = d.use_mmap;
  o.vocab_only = d.vocab_only;
  o.kv_page_tokens = d.kv_page_tokens;
  o.kv_pool_tokens = d.kv_pool_tokens;
  o.kv_memory_budget = d.kv_memory_budget;
  capi::init_versioned(out, size, o);
}

ember_status ember_model_load(const char* path, const ember_model_options* options, ember_model** out) {
  return guard([&] {
    require_arg(out, "out");
    require_arg(path, "path");
    return hand_out(Model::load(path, to_cpp(options)), out);
  });
}

ember_status ember_model_load_from_memory(const void* data, size_t size, int32_t copy,
                                          const ember_model_options* options, ember_model** out) {
  return guard([&] {
    require_arg(out, "out");
    require_arg(data, "data");
    const std::span image(static_cast<const std::byte*>(data), size);
    return hand_out(Model::load_from_memory(image, to_cpp(options), copy != 0), out);
  });
}

ember_status ember_model_load_from_reader(uint64_t size, ember_read_fn read, void* user,
                                          const ember_model_options* options, ember_model** out) {
  return guard([&] {
    require_arg(out, "out");
    require_arg(reinterpret_cast<const void*>(read), "read");
    const Model::ReadAt reader = [read, user](uint64_t offset, void* dst, size_t n) {
      return read(user, offset, dst, n) != 0;
    };
    return hand_out(Model::load_from_reader(size, reader, to_cpp(options)), out);
  });
}

void ember_model_free(ember_model* model) { delete model; }

ember_status ember_model_get_info(const ember_model* model, ember_model_info* info) {
  return guard([&] {
    require_arg(model, "model");
    const Model& m = *model->model;
    const ModelInfo& i = m.info();
    const KVPoolMemory kv = m.kv_memory();
    ember_model_info out{};
    out.architecture = i.architecture.c_str();
    out.name = i.name.c_str();
    out.chat_template = i.chat_template.c_str();
    out.n_vocab = i.n_vocab;
    out.n_ctx_train = i.n_ctx_train;
    out.n_embd = i.n_embd;
    out.n_layer = i.n_layer;
    out.n_head = i.n_head;
    out.n_head_kv = i.n_head_kv;
    out.head_dim = i.head_dim;
    out.threads = m.threads();
    out.bos_token = m.bos_token();
    out.eos_token = m.eos_token();
    out.weight_bytes = i.weight_bytes;
    out.kv_bytes_per_token = i.kv_bytes_per_token;
    out.kv_reserved_bytes = kv.bytes_total;
    out.kv_used_bytes = kv.bytes_used;
    capi::write_versioned(info, out, "ember_model_info");
    return EMBER_OK;
  });
}

ember_status ember_tokenize(const ember_model* model, const char* text, size_t length, int32_t add_bos,
                            int32_t parse_special, int32_t* tokens, size_t capacity, size_t* needed) {
  return guard([&] {
    require_arg(model, "model");
    if (length > 0) require_arg(text, "text");
    const auto ids = model->model->tokenize(std::string_view(text ? text : "", length), add_bos != 0,
                                            parse_special != 0);
    return capi::copy_out(std::span<const int32_t>(ids), tokens, capacity, needed);
  });
}

ember_status ember_detokenize(const ember_model* model, const int32_t* tokens, size_t n_tokens, int32_t render_special,
                              char* text, size_t capacity, size_t* needed) {
  return guard([&] {
    require_arg(model, "model");
    if (n_tokens > 0) require_arg(tokens, "tokens");
    const std::string s = model->model->detokenize(std::span(tokens, n_tokens), render_special != 0);
    return capi::copy_out(s, text, capacity, needed);
  });
}

int32_t ember_is_end_of_generation(const ember_model* model, int32_t token) {
  return model && model->model->is_end_of_generation(token) ? 1 : 0;
}

ember_status ember_chat_apply(const ember_model* model, const ember_chat_message* messages, size_t n_messages,
                              int32_t add_generation_prompt, char* text, size_t capacity, size_t* needed) {
  return guard([&] {
    require_arg(model, "model");
    const auto list = capi::to_cpp(messages, n_messages);
    return capi::copy_out(model->model->apply_chat_template(list, add_generation_prompt != 0), text, capacity, needed);
  });
}

}  // extern "C"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <memory>
#include <string>

#include "cli.hpp"

namespace ember::cli {

namespace {
// The device of --device (every command accepts it): where load_model puts the model.
Device g_device = Device::cpu;
int g_device_index = 0;  // cuda:N
}  // namespace

Args::Args(const std::vector<std::string>& argv, const std::vector<std::string>& flags_with_values,
           const std::vector<std::string>& switches, const std::map<std::string, std::string>& aliases) {
  auto contains = [](const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  for (const std::string& a : argv)
    if (a == "-h" || a == "--help") throw HelpRequested{};
  for (size_t i = 0; i < argv.size(); ++i) {
    std::string name = argv[i];
    if (auto it = aliases.find(name); it != aliases.end()) {
      name = it->second;
    } else if (auto ll = kLlamaAliases.find(name);
               ll != kLlamaAliases.end() && (contains(flags_with_values, ll->second) || contains(switches, ll->second))) {
      name = ll->second;
    }
    if (name == "-ngl" || name == "--n-gpu-layers" || name == "--gpu-layers") {
      if (i + 1 >= argv.size()) throw UsageError(fmt::format("{} needs a value", argv[i]));
      const std::string& v = argv[++i];
      char* end = nullptr;
      std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0') throw UsageError(fmt::format("{} must be an integer, got '{}'", argv[i - 1], v));
      std::fprintf(stderr, "ember: note: %s %s is ignored: ember runs all layers on one device (--device)\n",
                   argv[i - 1].c_str(), v.c_str());
      continue;
    }
    if (name == "--device") {
      if (i + 1 >= argv.size()) throw UsageError("--device needs a value: cpu, cuda or cuda:N");
      const std::string& v = argv[++i];
      if (v == "cpu") {
        g_device = Device::cpu;
      } else if (v == "cuda") {
        g_device = Device::cuda;
      } else if (v.rfind("cuda:", 0) == 0 && v.size() > 5 && v.size() <= 8 &&
                 v.find_first_not_of("0123456789", 5) == std::string::npos) {
        g_device = Device::cuda;
        g_device_index = std::stoi(v.substr(5));
      } else {
        throw UsageError(fmt::format("--device must be cpu, cuda or cuda:N (N a device number), got '{}'", v));
      }
      continue;
    }
    if (contains(switches, name)) {
      values_[name] = "1";
    } else if (contains(flags_with_values, name)) {
      if (i + 1 >= argv.size()) throw UsageError(fmt::format("{} needs a value", argv[i]));
      values_[name] = argv[++i];
    } else {
      throw UsageError(fmt::format("unknown argument '{}'", argv[i]));
    }
  }
}

bool Args::has(const std::string& name) const { return values_.count(name) != 0; }

std::string Args::get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) throw UsageError(fmt::format("{} is required", name));
  return it->second;
}

std::string Args::get_or(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

int64_t Args::get_int(const std::string& name, int64_t fallback, int64_t lo, int64_t hi) const {
  if (!has(name)) return fallback;
  const std::string v = get(name);
  char* end = nullptr;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < lo || n > hi)
    throw UsageError(fmt::format("{} must be an integer in [{}, {}], got '{}'", name, lo, hi, v));
  return n;
}

double Args::get_double(const std::string& name, double fallback, double lo, double hi) const {
  if (!has(name)) return fallback;
  const std::string v = get(name);
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(d >= lo && d <= hi))
    throw UsageError(fmt::format("{} must be a number in [{}, {}], got '{}'", name, lo, hi, v));
  return d;
}

bool stderr_is_terminal() { return isatty(STDERR_FILENO) == 1; }
bool stdin_is_terminal() { return isatty(STDIN_FILENO) == 1; }

ProgressBar::ProgressBar(std::string label) : label_(std::move(label)), enabled_(stderr_is_terminal()) {}
ProgressBar::~ProgressBar() { done(); }

void ProgressBar::update(double fraction) {
  if (!enabled_) return;
  const int percent = int(fraction * 100.0 + 0.5);
  if (percent == last_percent_) return;
  last_percent_ = percent;
  constexpr int kWidth = 30;
  const int filled = percent * kWidth / 100;
  std::fprintf(stderr, "\r%s [%s%s] %3d%%", label_.c_str(), std::string(size_t(filled), '#').c_str(),
               std::string(size_t(kWidth - filled), ' ').c_str(), percent);
  std::fflush(stderr);
}

void ProgressBar::done() {
  if (!enabled_ || last_percent_ < 0) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  last_percent_ = -1;
  enabled_ = false;
}

std::shared_ptr<Model> load_model(const std::string& path, int threads, bool verbose, bool vocab_only) {
  // Shared with the log callback, which outlives this function inside the model.
  auto bar = std::make_shared<ProgressBar>("loading " + path);
  ModelOptions options;
  options.backend = g_device;
  options.device_index = g_device_index;
  options.threads = threads;
  options.vocab_only = vocab_only;
  options.progress = [bar](float f) {
    bar->update(f);
    return true;
  };
  options.log = [verbose, bar](LogLevel level, std::string_view message) {
    if (!verbose && level < LogLevel::warning) return;
    bar->done();
    static const char* const kNames[] = {"debug", "info", "warning", "error"};
    std::fprintf(stderr, "[%s] %.*s\n", kNames[int(level)], int(message.size()), message.data());
  };
  auto model = Model::load(path, options);
  bar->done();
  return model;
}

namespace {
// llama.cpp's cache type names with the same meaning as one of ember's storages.
std::string kv_type_from_llama(const std::string& flag, const std::string& name) {
  if (name == "f16" || name == "f32") return name;
  if (name == "q8_0") return "int8";
  if (name == "q4_1") return "int4";
  throw UsageError(fmt::format("{} {}: ember stores the cache as f16, f32, q8_0 (its int8, group 32) or q4_1 (its "
                               "int4, group 32, with a minimum)",
                               flag, name));
}
}  // namespace

void apply_kv_args(const Args& args, KVCacheOptions& kv) {
  std::string type = args.get_or("--kv-type", "");
  const auto llama_type = [&](const char* flag) {
    return args.has(flag) ? kv_type_from_llama(flag, args.get(flag)) : std::string();
  };
  const std::string k = llama_type("--cache-type-k"), v = llama_type("--cache-type-v");
  if (!k.empty() || !v.empty()) {
    // llama.cpp's q8_0 keys with q4_1 values are ember's k8v4; otherwise one type for both.
    const std::string t = k == "int8" && v == "int4" ? "k8v4" : k.empty() ? v : k;
    if ((!k.empty() && !v.empty() && k != v && t != "k8v4") || (!type.empty() && t != type))
      throw UsageError(fmt::format("cache types {}/{} disagree with each other or with --kv-type ({}): ember stores "
                                   "keys and values in one type, or q8_0 keys with q4_1 values (k8v4)",
                                   k.empty() ? "-" : args.get("--cache-type-k"),
                                   v.empty() ? "-" : args.get("--cache-type-v"), type.empty() ? "-" : type));
    type = t;
  }
  if (type.empty()) type = "f16";
  if (type == "f16") {
    kv.storage = KVStorage::f16;
  } else if (type == "f32") {
    kv.storage = KVStorage::f32;
  } else if (type == "int8") {
    kv.storage = KVStorage::int8;
  } else if (type == "int4") {
    kv.storage = KVStorage::int4;
  } else if (type == "int4o") {
    kv.storage = KVStorage::int4o;
  } else if (type == "k8v4") {
    kv.storage = KVStorage::k8v4;
  } else {
    throw UsageError("--kv-type must be f16, f32, int8, int4, int4o or k8v4, got '" + type + "'");
  }
  kv.group_size = int32_t(args.get_int("--kv-group", 32, 32, 64));
  if (kv.group_size != 32 && kv.group_size != 64) throw UsageError("--kv-group must be 32 or 64");
  kv.exact_recent = int32_t(args.get_int("--kv-exact", 0, 0, 4096));
  const std::string evict = args.get_or("--evict", "none");
  if (evict == "none") {
    kv.eviction = KVEviction::none;
  } else if (evict == "streaming") {
    kv.eviction = KVEviction::streaming;
  } else if (evict == "h2o") {
    kv.eviction = KVEviction::h2o;
  } else {
    throw UsageError("--evict must be none, streaming or h2o, got '" + evict + "'");
  }
  kv.sinks = int32_t(args.get_int("--sinks", 4, 0, 1 << 20));
  kv.window = int32_t(args.get_int("--window", 1020, 1, 1 << 24));
  kv.heavy = int32_t(args.get_int("--heavy", 128, 0, 1 << 24));
  kv.recent = int32_t(args.get_int("--recent", 128, 1, 1 << 24));
  if (kv.eviction == KVEviction::streaming && kv.window <= kv.sinks)
    throw UsageError("--window must be larger than --sinks");
}

std::string describe_kv(const KVCacheOptions& kv) {
  const char* names[] = {"f16", "f32", "int8", "int4", "int4o", "k8v4"};
  std::string out = names[int(kv.storage)];
  if (kv.storage != KVStorage::f16 && kv.storage != KVStorage::f32)
    out += " (group " + std::to_string(kv.group_size) + ")";
  switch (kv.eviction) {
    case KVEviction::none: out += ", no eviction, " + std::to_string(kv.max_tokens) + " tokens"; break;
    case KVEviction::streaming:
      out += ", streaming: " + std::to_string(kv.sinks) + " sinks + " + std::to_string(kv.window) + " window";
      break;
    case KVEviction::h2o:
      out += ", h2o: " + std::to_string(kv.heavy) + " heavy + " + std::to_string(kv.recent) + " recent";
      break;
  }
  return out;
}

}  // namespace ember::cli

namespace ember::cli {

std::string read_text_file(const std::string& path, const char* what, size_t max_bytes) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw Error(ErrorCode::io, fmt::format("cannot open the {} '{}'", what, path));
  std::string text;
  char piece[1 << 16];
  for (;;) {
    const size_t n = std::fread(piece, 1, sizeof piece, f.get());
    if (n > max_bytes - text.size())
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("the {} '{}' is larger than {} MiB", what, path, max_bytes >> 20));
    text.append(piece, n);
    if (n < sizeof piece) break;
  }
  if (std::ferror(f.get())) throw Error(ErrorCode::io, fmt::format("cannot read the {} '{}'", what, path));
  return text;
}

std::string process_escapes(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\' || i + 1 == text.size()) {
      out += text[i];
      continue;
    }
    const char c = text[++i];
    switch (c) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '\\': out += '\\'; break;
      case '"': out += '"'; break;
      case '\'': out += '\''; break;
      case 'x':
        if (i + 2 < text.size() && std::isxdigit(static_cast<unsigned char>(text[i + 1])) &&
            std::isxdigit(static_cast<unsigned char>(text[i + 2]))) {
          out += static_cast<char>(std::stoi(text.substr(i + 1, 2), nullptr, 16));
          i += 2;
          break;
        }
        [[fallthrough]];
      default:
        out += '\\';
        out += c;
    }
  }
  return out;
}

}  // namespace ember::cli

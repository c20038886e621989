#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <algorithm>
#include <cstdlib>

#include "cli.hpp"

namespace ember::cli {

Args::Args(const std::vector<std::string>& argv, const std::vector<std::string>& flags_with_values,
           const std::vector<std::string>& switches, const std::map<std::string, std::string>& aliases) {
  auto contains = [](const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  for (size_t i = 0; i < argv.size(); ++i) {
    std::string name = argv[i];
    if (auto it = aliases.find(name); it != aliases.end()) name = it->second;
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

}  // namespace ember::cli

// Prometheus text format 0.0.4 and JSON writers for metric families, with the
// name and consistency checks both share.
#include "metrics/exposition.hpp"

#include <cmath>
#include <set>
#include <string_view>

#include "common/fail.hpp"

namespace ember::metrics {

namespace {

bool is_name_start(char c, bool allow_colon) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (allow_colon && c == ':');
}
bool is_name_char(char c, bool allow_colon) { return is_name_start(c, allow_colon) || (c >= '0' && c <= '9'); }

// [a-zA-Z_:][a-zA-Z0-9_:]* for metric names, [a-zA-Z_][a-zA-Z0-9_]* for label names.
bool valid_name(std::string_view name, bool allow_colon) {
  if (name.empty() || !is_name_start(name[0], allow_colon)) return false;
  for (char c : name)
    if (!is_name_char(c, allow_colon)) return false;
  return true;
}

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::counter: return "counter";
    case Kind::gauge: return "gauge";
    case Kind::histogram: return "histogram";
  }
  fail(ErrorCode::invalid_argument, "metric kind {} is not counter, gauge or histogram", static_cast<int>(kind));
}

std::span<const double> bounds_of(const Family& family) {
  if (family.bounds.empty()) return Histogram::default_latency_bounds();
  return family.bounds;
}

void validate(std::span<const Family> families) {
  std::set<std::string_view> names;
  for (const Family& f : families) {
    require(valid_name(f.name, true), "metric name \"{}\" does not match [a-zA-Z_:][a-zA-Z0-9_:]*", f.name);
    require(names.insert(f.name).second, "metric name \"{}\" appears twice", f.name);
    kind_name(f.kind);
    if (f.kind == Kind::counter) {
      constexpr std::string_view kSuffix = "_total";
      require(f.name.size() > kSuffix.size() && std::string_view(f.name).ends_with(kSuffix),
              "counter \"{}\" must end in \"_total\"", f.name);
    }
    if (f.kind == Kind::histogram) {
      require(f.histogram != nullptr, "histogram \"{}\" has no Histogram", f.name);
      require(f.samples.empty(), "histogram \"{}\" has {} samples; histograms take none", f.name, f.samples.size());
      const std::span<const double> bounds = bounds_of(f);
      for (size_t i = 0; i < bounds.size(); ++i) {
        require(std::isfinite(bounds[i]), "histogram \"{}\": bound {} = {} is not finite", f.name, i, bounds[i]);
        require(i == 0 || bounds[i] > bounds[i - 1], "histogram \"{}\": bound {} = {} is not above bound {} = {}",
                f.name, i, bounds[i], i - 1, i == 0 ? 0.0 : bounds[i - 1]);
      }
    } else {
      require(f.histogram == nullptr, "{} \"{}\" has a Histogram; only histograms take one", kind_name(f.kind),
              f.name);
      for (const Sample& s : f.samples) {
        std::set<std::string_view> label_names;
        for (const auto& [label, value] : s.labels) {
          require(valid_name(label, false), "metric \"{}\": label name \"{}\" does not match [a-zA-Z_][a-zA-Z0-9_]*",
                  f.name, label);
          require(label_names.insert(label).second, "metric \"{}\": label name \"{}\" appears twice in a sample",
                  f.name, label);
        }
      }
    }
  }
}

// ---- Prometheus -------------------------------------------------------------

// Shortest spelling that parses back to the same double; Go's ParseFloat spellings
// for the non-finite values.
std::string prom_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

// HELP text: backslash and newline escaped. Label values: also the double quote.
void append_escaped(std::string& out, std::string_view text, bool escape_quote) {
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && escape_quote) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
}

void append_labels(std::string& out, const std::vector<std::pair<std::string, std::string>>& labels) {
  if (labels.empty()) return;
  out += '{';
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i > 0) out += ',';
    out += labels[i].first;
    out += "=\"";
    append_escaped(out, labels[i].second, true);
    out += '"';
  }
  out += '}';
}

// ---- JSON -------------------------------------------------------------------

void append_json_string(std::string& out, std::string_view text) {
  out += '"';
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"') {
      out += "\\\"";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (byte < 0x20) {
      out += fmt::format("\\u{:04x}", byte);
    } else {
      out += c;
    }
  }
  out += '"';
}

std::string json_number(double v) { return std::isfinite(v) ? fmt::format("{}", v) : std::string("null"); }

}  // namespace

std::string to_prometheus(std::span<const Family> families) {
  validate(families);
  std::string out;
  for (const Family& f : families) {
    out += "# HELP ";
    out += f.name;
    out += ' ';
    append_escaped(out, f.help, false);
    out += "\n# TYPE ";
    out += f.name;
    out += ' ';
    out += kind_name(f.kind);
    out += '\n';
    if (f.kind == Kind::histogram) {
      for (const auto& [le, n] : f.histogram->cumulative(bounds_of(f)))
        out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", f.name, prom_number(le), n);
      out += fmt::format("{}_sum {}\n{}_count {}\n", f.name, prom_number(f.histogram->sum()), f.name,
                         f.histogram->count());
      continue;
    }
    for (const Sample& s : f.samples) {
      out += f.name;
      append_labels(out, s.labels);
      out += ' ';
      out += prom_number(s.value);
      out += '\n';
    }
  }
  return out;
}

std::string to_json(std::span<const Family> families) {
  validate(families);
  std::string out = "{";
  for (size_t i = 0; i < families.size(); ++i) {
    const Family& f = families[i];
    if (i > 0) out += ',';
    append_json_string(out, f.name);
    out += ":{\"type\":";
    append_json_string(out, kind_name(f.kind));
    out += ",\"help\":";
    append_json_string(out, f.help);
    if (f.kind == Kind::histogram) {
      const Histogram& h = *f.histogram;
      out += fmt::format(",\"count\":{},\"sum\":{},\"mean\":{},\"p50\":{},\"p90\":{},\"p99\":{},\"min\":{},\"max\":{}",
                         h.count(), json_number(h.sum()), json_number(h.mean()), json_number(h.quantile(0.5)),
                         json_number(h.quantile(0.9)), json_number(h.quantile(0.99)), json_number(h.min()),
                         json_number(h.max()));
    } else if (f.samples.size() == 1 && f.samples[0].labels.empty()) {
      out += ",\"value\":";
      out += json_number(f.samples[0].value);
    } else {
      out += ",\"samples\":[";
      for (size_t s = 0; s < f.samples.size(); ++s) {
        if (s > 0) out += ',';
        out += "{\"labels\":{";
        const auto& labels = f.samples[s].labels;
        for (size_t l = 0; l < labels.size(); ++l) {
          if (l > 0) out += ',';
          append_json_string(out, labels[l].first);
          out += ':';
          append_json_string(out, labels[l].second);
        }
        out += "},\"value\":";
        out += json_number(f.samples[s].value);
        out += '}';
      }
      out += ']';
    }
    out += '}';
  }
  out += '}';
  return out;
}

}  // namespace ember::metrics

// Metric families and their two text forms: the Prometheus text exposition format
// 0.0.4 (https://prometheus.io/docs/instrumenting/exposition_formats/) for scraping,
// and a compact JSON object for humans and tests. The Engine builds a list of
// Family values from its counters, gauges and histograms and passes it here, so the
// writers know nothing about the engine.
#pragma once

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "metrics/histogram.hpp"

namespace ember::metrics {

// One value of a counter or gauge family, distinguished by its labels.
struct Sample {
  std::vector<std::pair<std::string, std::string>> labels;  // (name, value); names match [a-zA-Z_][a-zA-Z0-9_]*, unique
  double value = 0.0;                                       // any double; ±inf and NaN allowed
};

enum class Kind { counter, gauge, histogram };

struct Family {
  std::string name;             // matches [a-zA-Z_:][a-zA-Z0-9_:]*; counters end in "_total"
  std::string help;             // free UTF-8 text, escaped on output
  Kind kind = Kind::gauge;      // what the family is
  std::vector<Sample> samples;  // kind counter/gauge: its samples (may be empty); histogram: must be empty
  const Histogram* histogram = nullptr;  // kind histogram: the one unlabelled histogram (not owned); else null
  std::vector<double> bounds;  // kind histogram: bucket bounds `le`, seconds, finite, strictly increasing;
                               // empty = Histogram::default_latency_bounds(); +Inf is always added
};

// The families in the Prometheus text format 0.0.4, in the given order:
//   # HELP name help          (help with \ and newline escaped)
//   # TYPE name counter|gauge|histogram
//   name{label="value",...} value
// and for a histogram name_bucket{le="..."} lines (cumulative, ending with le="+Inf"),
// name_sum and name_count. Numbers are written in their shortest round-trip form;
// +Inf, -Inf and NaN are spelled so. Throws ember::Error(invalid_argument) naming the
// family or label at fault for an invalid metric or label name, a counter not ending
// in "_total", a duplicate family name or label name, or an inconsistent family.
std::string to_prometheus(std::span<const Family> families);

// The families as one JSON object keyed by family name, in the given order:
//   counter/gauge, one unlabelled sample: {"type":"gauge","help":"...","value":x}
//   otherwise:       {"type":"counter","help":"...","samples":[{"labels":{"k":"v"},"value":x},...]}
//   histogram:       {"type":"histogram","help":"...","count":N,"sum":S,"mean":M,
//                     "p50":..,"p90":..,"p99":..,"min":..,"max":..}   (seconds)
// Strings are escaped per RFC 8259 (control characters as \u00XX); non-finite numbers
// are written as null. Validates the families as to_prometheus() does.
std::string to_json(std::span<const Family> families);

}  // namespace ember::metrics

// Prometheus text and JSON output of metric families: exact expected text for a
// small registry, JSON parsed back by a minimal RFC 8259 reader, number round trips,
// and every rejected name or inconsistent family.
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/catch.hpp"
#include "common/expect_error.hpp"
#include "ember/error.hpp"
#include "metrics/exposition.hpp"

using namespace ember;
using namespace ember::metrics;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- a minimal JSON reader (objects keep their key order) --------------------

struct Json {
  enum class Type { null, boolean, number, string, array, object } type = Type::null;
  bool boolean = false;
  double number = 0.0;
  std::string string;
  std::vector<Json> items;                                 // array
  std::vector<std::pair<std::string, Json>> members;       // object, in order

  const Json& operator[](const std::string& key) const {
    for (const auto& [k, v] : members)
      if (k == key) return v;
    FAIL("no key " << key);
    return *this;
  }
};

class JsonReader {
 public:
  explicit JsonReader(const std::string& text) : s_(text) {}

  Json parse_document() {
    Json v = value();
    skip_space();
    if (pos_ != s_.size()) error("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void error(const std::string& what) {
    throw std::runtime_error("JSON: " + what + " at offset " + std::to_string(pos_));
  }
  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t' || s_[pos_] == '\r')) ++pos_;
  }
  char peek() {
    skip_space();
    if (pos_ >= s_.size()) error("unexpected end");
    return s_[pos_];
  }
  void expect(char c) {
    if (peek() != c) error(std::string("expected ") + c);
    ++pos_;
  }
  bool literal(const char* word) {
    const std::string w(word);
    if (s_.compare(pos_, w.size(), w) != 0) return false;
    pos_ += w.size();
    return true;
  }
  Json value() {
    Json v;
    const char c = peek();
    if (c == '{') {
      v.type = Json::Type::object;
      ++pos_;
      if (peek() == '}') return ++pos_, v;
      for (;;) {
        std::string key = string_body();
        expect(':');
        v.members.emplace_back(std::move(key), value());
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.type = Json::Type::array;
      ++pos_;
      if (peek() == ']') return ++pos_, v;
      for (;;) {
        v.items.push_back(value());
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.type = Json::Type::string;
      v.string = string_body();
      return v;
    }
    if (literal("null")) return v;
    if (literal("true")) {
      v.type = Json::Type::boolean;
      v.boolean = true;
      return v;
    }
    if (literal("false")) {
      v.type = Json::Type::boolean;
      return v;
    }
    // number = -? int frac? exp?  (checked by hand, converted by strtod)
    const size_t start = pos_;
    if (s_[pos_] == '-') ++pos_;
    auto digits = [&] {
      const size_t from = pos_;
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
      if (pos_ == from) error("digit expected");
    };
    if (pos_ < s_.size() && s_[pos_] == '0') {
      ++pos_;
    } else {
      digits();
    }
    if (pos_ < s_.size() && s_[pos_] == '.') ++pos_, digits();
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      digits();
    }
    v.type = Json::Type::number;
    v.number = std::strtod(s_.substr(start, pos_ - start).c_str(), nullptr);
    return v;
  }
  std::string string_body() {
    expect('"');
    std::string out;
    for (;;) {
      if (pos_ >= s_.size()) error("unterminated string");
      const char c = s_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) error("raw control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      const char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          const unsigned code = std::stoul(s_.substr(pos_, 4), nullptr, 16);
          pos_ += 4;
          if (code >= 0x80) error("only ASCII \\u escapes expected");
          out += static_cast<char>(code);
          break;
        }
        default: error("bad escape");
      }
    }
  }

  const std::string& s_;
  size_t pos_ = 0;
};

Json parse_json(const std::string& text) { return JsonReader(text).parse_document(); }

// ---- the registry used by the exact-text tests ---------------------------------

// Dyadic samples so that the sum prints exactly: 2 values ≤ 0.01, 3 ≤ 0.1, 4 ≤ 1, 5 in all.
std::unique_ptr<Histogram> make_ttft() {
  auto h = std::make_unique<Histogram>();
  for (double v : {0.0078125, 0.0625, 0.5, 2.0, 0.0078125}) h->record(v);
  return h;
}

std::vector<Family> make_registry(const Histogram& ttft) {
  std::vector<Family> f(3);
  f[0].name = "ember_tokens_total";
  f[0].help = "Tokens generated.\nAll requests, back\\slash \"quoted\"";
  f[0].kind = Kind::counter;
  f[0].samples = {{{}, 1234}};
  f[1].name = "ember_queue_depth";
  f[1].help = "Queued requests per model.";
  f[1].kind = Kind::gauge;
  f[1].samples = {{{{"model", "a\"b\\c\nd"}, {"slot", "0"}}, 2.5},
                  {{{"model", "plain"}, {"slot", "1"}}, kNaN},
                  {{{"model", "x"}, {"slot", "2"}}, -kInf}};
  f[2].name = "ember_ttft_seconds";
  f[2].help = "Time to first token.";
  f[2].kind = Kind::histogram;
  f[2].histogram = &ttft;
  f[2].bounds = {0.01, 0.1, 1};
  return f;
}

}  // namespace

TEST_CASE("Prometheus text of a small registry", "[metrics][exposition]") {
  const auto ttft = make_ttft();
  const auto families = make_registry(*ttft);
  const std::string expected =
      "# HELP ember_tokens_total Tokens generated.\\nAll requests, back\\\\slash \"quoted\"\n"
      "# TYPE ember_tokens_total counter\n"
      "ember_tokens_total 1234\n"
      "# HELP ember_queue_depth Queued requests per model.\n"
      "# TYPE ember_queue_depth gauge\n"
      "ember_queue_depth{model=\"a\\\"b\\\\c\\nd\",slot=\"0\"} 2.5\n"
      "ember_queue_depth{model=\"plain\",slot=\"1\"} NaN\n"
      "ember_queue_depth{model=\"x\",slot=\"2\"} -Inf\n"
      "# HELP ember_ttft_seconds Time to first token.\n"
      "# TYPE ember_ttft_seconds histogram\n"
      "ember_ttft_seconds_bucket{le=\"0.01\"} 2\n"
      "ember_ttft_seconds_bucket{le=\"0.1\"} 3\n"
      "ember_ttft_seconds_bucket{le=\"1\"} 4\n"
      "ember_ttft_seconds_bucket{le=\"+Inf\"} 5\n"
      "ember_ttft_seconds_sum 2.578125\n"
      "ember_ttft_seconds_count 5\n";
  CHECK(to_prometheus(families) == expected);
  CHECK(to_prometheus({}) == "");
}

TEST_CASE("a histogram without bounds uses the default latency bounds", "[metrics][exposition]") {
  Histogram h;
  for (double v : {0.003, 0.003, 0.04, 7.0, 100.0}) h.record(v);
  Family f;
  f.name = "ember_itl_seconds";
  f.help = "Inter-token latency.";
  f.kind = Kind::histogram;
  f.histogram = &h;
  const std::string text = to_prometheus(std::span<const Family>(&f, 1));
  const std::string expected =
      "# HELP ember_itl_seconds Inter-token latency.\n"
      "# TYPE ember_itl_seconds histogram\n"
      "ember_itl_seconds_bucket{le=\"0.001\"} 0\n"
      "ember_itl_seconds_bucket{le=\"0.0025\"} 0\n"
      "ember_itl_seconds_bucket{le=\"0.005\"} 2\n"
      "ember_itl_seconds_bucket{le=\"0.01\"} 2\n"
      "ember_itl_seconds_bucket{le=\"0.025\"} 2\n"
      "ember_itl_seconds_bucket{le=\"0.05\"} 3\n"
      "ember_itl_seconds_bucket{le=\"0.1\"} 3\n"
      "ember_itl_seconds_bucket{le=\"0.25\"} 3\n"
      "ember_itl_seconds_bucket{le=\"0.5\"} 3\n"
      "ember_itl_seconds_bucket{le=\"1\"} 3\n"
      "ember_itl_seconds_bucket{le=\"2.5\"} 3\n"
      "ember_itl_seconds_bucket{le=\"5\"} 3\n"
      "ember_itl_seconds_bucket{le=\"10\"} 4\n"
      "ember_itl_seconds_bucket{le=\"30\"} 4\n"
      "ember_itl_seconds_bucket{le=\"60\"} 4\n"
      "ember_itl_seconds_bucket{le=\"+Inf\"} 5\n"
      "ember_itl_seconds_sum 107.046\n"
      "ember_itl_seconds_count 5\n";
  CHECK(h.sum() == 0.003 + 0.003 + 0.04 + 7.0 + 100.0);
  CHECK(text == expected);
}

TEST_CASE("Prometheus numbers parse back to the same double", "[metrics][exposition]") {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> exponent(-300, 300);
  std::vector<double> values = {0.1, 1.0 / 3.0, 1e-7, 123456789012345678.0, -2.5, 0.0, 5e-324,
                                std::numeric_limits<double>::max()};
  for (int i = 0; i < 200; ++i) values.push_back(std::pow(10.0, exponent(rng)) * (i % 2 ? 1 : -1));
  for (double v : values) {
    Family f;
    f.name = "g";
    f.kind = Kind::gauge;
    f.samples = {{{}, v}};
    const std::string text = to_prometheus(std::span<const Family>(&f, 1));
    const std::string prefix = "# HELP g \n# TYPE g gauge\ng ";
    REQUIRE(text.compare(0, prefix.size(), prefix) == 0);
    REQUIRE(text.back() == '\n');
    const std::string number = text.substr(prefix.size(), text.size() - prefix.size() - 1);
    INFO("value " << v << " written " << number);
    CHECK(std::strtod(number.c_str(), nullptr) == v);
    // Also through JSON.
    const Json j = parse_json(to_json(std::span<const Family>(&f, 1)));
    CHECK(j["g"]["value"].number == v);
  }
  // Short forms where they exist.
  Family f;
  f.name = "g";
  f.kind = Kind::gauge;
  f.samples = {{{}, 0.1}, {{}, 1e-7}, {{}, 42.0}, {{}, kInf}};
  CHECK(to_prometheus(std::span<const Family>(&f, 1)) == "# HELP g \n# TYPE g gauge\ng 0.1\ng 1e-07\ng 42\ng +Inf\n");
}

TEST_CASE("JSON of a small registry, exact and parsed back", "[metrics][exposition]") {
  const auto ttft = make_ttft();
  auto families = make_registry(*ttft);
  const std::string text = to_json(families);
  const Json j = parse_json(text);
  REQUIRE(j.type == Json::Type::object);
  REQUIRE(j.members.size() == 3);
  CHECK(j.members[0].first == "ember_tokens_total");
  CHECK(j.members[1].first == "ember_queue_depth");
  CHECK(j.members[2].first == "ember_ttft_seconds");

  const Json& tokens = j["ember_tokens_total"];
  CHECK(tokens["type"].string == "counter");
  CHECK(tokens["help"].string == families[0].help);  // \n, \\ and \" decoded back
  CHECK(tokens["value"].type == Json::Type::number);
  CHECK(tokens["value"].number == 1234);

  const Json& queue = j["ember_queue_depth"];
  CHECK(queue["type"].string == "gauge");
  const Json& samples = queue["samples"];
  REQUIRE(samples.items.size() == 3);
  CHECK(samples.items[0]["labels"]["model"].string == "a\"b\\c\nd");
  CHECK(samples.items[0]["labels"]["slot"].string == "0");
  CHECK(samples.items[0]["value"].number == 2.5);
  CHECK(samples.items[1]["labels"]["model"].string == "plain");
  CHECK(samples.items[1]["value"].type == Json::Type::null);  // NaN
  CHECK(samples.items[2]["value"].type == Json::Type::null);  // -inf

  // Sorted samples: 0.0078125, 0.0078125, 0.0625, 0.5, 2.
  const Json& h = j["ember_ttft_seconds"];
  CHECK(h["type"].string == "histogram");
  CHECK(h["count"].number == 5);
  CHECK(h["sum"].number == 2.578125);
  CHECK(h["mean"].number == 2.578125 / 5);
  CHECK(h["min"].number == 0.0078125);
  CHECK(h["max"].number == 2.0);
  CHECK(std::abs(h["p50"].number - 0.0625) <= 0.1 * 0.0625);  // x_2
  CHECK(std::abs(h["p90"].number - 0.5) <= 0.1 * 0.5);        // x_floor(3.6) = x_3
  CHECK(std::abs(h["p99"].number - 0.5) <= 0.1 * 0.5);        // x_floor(3.96) = x_3
  CHECK(h["p50"].number == ttft->quantile(0.5));
  CHECK(h["p99"].number == ttft->quantile(0.99));

  // Exact text for a tiny registry with every escape.
  std::vector<Family> tiny(3);
  tiny[0].name = "a_total";
  tiny[0].help = std::string("q\"\\\n\t\x01\x1f") + "\xc3\xa9";  // UTF-8 passes through
  tiny[0].kind = Kind::counter;
  tiny[0].samples = {{{}, 3}};
  tiny[1].name = "g";
  tiny[1].kind = Kind::gauge;
  tiny[1].samples = {{{{"k", "v\""}}, kNaN}, {{{"k", "w"}}, 0.25}};
  tiny[2].name = "e";
  tiny[2].kind = Kind::gauge;  // no samples
  const std::string tiny_expected =
      "{\"a_total\":{\"type\":\"counter\",\"help\":\"q\\\"\\\\\\u000a\\u0009\\u0001\\u001f\xc3\xa9\",\"value\":3},"
      "\"g\":{\"type\":\"gauge\",\"help\":\"\",\"samples\":[{\"labels\":{\"k\":\"v\\\"\"},\"value\":null},"
      "{\"labels\":{\"k\":\"w\"},\"value\":0.25}]},"
      "\"e\":{\"type\":\"gauge\",\"help\":\"\",\"samples\":[]}}";
  CHECK(to_json(tiny) == tiny_expected);
  CHECK(parse_json(tiny_expected)["a_total"]["help"].string == tiny[0].help);
  CHECK(to_json({}) == "{}");
}

TEST_CASE("an empty histogram writes zeros", "[metrics][exposition]") {
  Histogram h;
  Family f;
  f.name = "x_seconds";
  f.kind = Kind::histogram;
  f.histogram = &h;
  f.bounds = {1};
  CHECK(to_json(std::span<const Family>(&f, 1)) ==
        "{\"x_seconds\":{\"type\":\"histogram\",\"help\":\"\",\"count\":0,\"sum\":0,\"mean\":0,"
        "\"p50\":0,\"p90\":0,\"p99\":0,\"min\":0,\"max\":0}}");
  CHECK(to_prometheus(std::span<const Family>(&f, 1)) ==
        "# HELP x_seconds \n# TYPE x_seconds histogram\nx_seconds_bucket{le=\"1\"} 0\n"
        "x_seconds_bucket{le=\"+Inf\"} 0\nx_seconds_sum 0\nx_seconds_count 0\n");
}

TEST_CASE("invalid names and inconsistent families throw invalid_argument", "[metrics][exposition]") {
  using Writer = std::string (*)(std::span<const Family>);
  const Writer writers[] = {&to_prometheus, &to_json};
  Histogram h;
  auto gauge = [](std::string name, std::vector<std::pair<std::string, std::string>> labels = {}) {
    Family f;
    f.name = std::move(name);
    f.kind = Kind::gauge;
    f.samples = {{std::move(labels), 1.0}};
    return f;
  };
  for (Writer write : writers) {
    auto expect = [&](std::vector<Family> families, const std::string& needle) {
      test::expect_error([&] { write(families); }, ErrorCode::invalid_argument, needle);
    };
    // Metric names: [a-zA-Z_:][a-zA-Z0-9_:]*
    expect({gauge("1abc")}, "metric name \"1abc\"");
    expect({gauge("ember-queue")}, "metric name \"ember-queue\"");
    expect({gauge("")}, "metric name \"\"");
    expect({gauge("ember queue")}, "metric name \"ember queue\"");
    expect({gauge("ok"), gauge("ok")}, "metric name \"ok\" appears twice");
    CHECK_NOTHROW(write(std::vector<Family>{gauge("a:b_C9"), gauge("_x"), gauge(":y")}));
    // Label names: [a-zA-Z_][a-zA-Z0-9_]* (no colon)
    expect({gauge("g", {{"bad-label", "v"}})}, "label name \"bad-label\"");
    expect({gauge("g", {{"0x", "v"}})}, "label name \"0x\"");
    expect({gauge("g", {{"a:b", "v"}})}, "label name \"a:b\"");
    expect({gauge("g", {{"", "v"}})}, "label name \"\"");
    expect({gauge("g", {{"k", "1"}, {"k", "2"}})}, "label name \"k\" appears twice");
    CHECK_NOTHROW(write(std::vector<Family>{gauge("g", {{"_k9", "any \"value\"\n"}})}));
    // Counters end in _total.
    Family counter = gauge("ember_requests");
    counter.kind = Kind::counter;
    expect({counter}, "counter \"ember_requests\" must end in \"_total\"");
    counter.name = "_total";
    expect({counter}, "counter \"_total\"");
    counter.name = "ember_requests_total";
    CHECK_NOTHROW(write(std::vector<Family>{counter}));
    // Histograms: a Histogram, no samples, finite increasing bounds.
    Family hist;
    hist.name = "lat_seconds";
    hist.kind = Kind::histogram;
    expect({hist}, "histogram \"lat_seconds\" has no Histogram");
    hist.histogram = &h;
    hist.bounds = {0.1, 0.1};
    expect({hist}, "histogram \"lat_seconds\": bound 1 = 0.1");
    hist.bounds = {0.1, kInf};
    expect({hist}, "histogram \"lat_seconds\": bound 1 = inf");
    hist.bounds = {};
    hist.samples = {{{}, 1.0}};
    expect({hist}, "histogram \"lat_seconds\" has 1 samples");
    Family gauge_with_histogram = gauge("g");
    gauge_with_histogram.histogram = &h;
    expect({gauge_with_histogram}, "gauge \"g\" has a Histogram");
    Family bad_kind = gauge("g");
    bad_kind.kind = static_cast<Kind>(7);
    expect({bad_kind}, "metric kind 7");
  }
}

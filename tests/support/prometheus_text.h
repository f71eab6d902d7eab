// A strict reader of the Prometheus text exposition format (0.0.4) for the
// tests: it parses what /metrics serves and lists everything that is not
// well-formed, so a test can assert there is nothing, and then read values.
//
// Checked: every line is a # HELP, a # TYPE, another comment, or a sample
// `name{label="value",...} value`; names and label names are valid; label
// values use only the \\ \" \n escapes; a family's HELP and TYPE come once,
// before its samples, and its samples are contiguous; every sample belongs
// to a family with HELP and TYPE; counters end in _total; no series appears
// twice; values parse (numbers, +Inf, -Inf, NaN); histograms have _bucket
// series with `le`, increasing bounds, cumulative counts that never
// decrease, a +Inf bucket, and _sum and _count with _count equal to the +Inf
// bucket; the text ends with a newline.
#pragma once

#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace lg::test {

struct PromSample {
  std::string name;  // as written: with _bucket, _sum, _count for histograms
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct PromFamily {
  std::string name;
  std::string help;  // unescaped
  std::string type;
  std::vector<PromSample> samples;
};

struct PromText {
  std::vector<std::string> errors;  // empty: well-formed
  std::map<std::string, PromFamily> families;

  // The value of the series `name` with exactly these labels; nullopt when absent.
  std::optional<double> find(const std::string& name, const std::map<std::string, std::string>& labels = {}) const {
    for (const auto& [_, f] : families) {
      for (const PromSample& s : f.samples) {
        if (s.name == name && s.labels == labels) return s.value;
      }
    }
    return std::nullopt;
  }
  // The value, or 0 when absent (a counter not yet counted).
  double value(const std::string& name, const std::map<std::string, std::string>& labels = {}) const {
    return find(name, labels).value_or(0);
  }
  // The sum of every series of `name` whose labels include `match`.
  double sum(const std::string& name, const std::map<std::string, std::string>& match = {}) const {
    double total = 0;
    for (const auto& [_, f] : families) {
      for (const PromSample& s : f.samples) {
        if (s.name != name) continue;
        bool ok = true;
        for (const auto& [k, v] : match) {
          auto it = s.labels.find(k);
          ok = ok && it != s.labels.end() && it->second == v;
        }
        if (ok) total += s.value;
      }
    }
    return total;
  }
};

namespace prom_detail {

inline bool nameChar(char c, bool first, bool colon) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') return true;
  if (colon && c == ':') return true;
  return !first && c >= '0' && c <= '9';
}

inline size_t readName(std::string_view s, size_t i, bool colon) {
  size_t j = i;
  while (j < s.size() && nameChar(s[j], j == i, colon)) ++j;
  return j;
}

inline std::optional<double> parseValue(std::string_view v) {
  if (v == "+Inf" || v == "Inf") return HUGE_VAL;
  if (v == "-Inf") return -HUGE_VAL;
  if (v == "NaN") return std::nan("");
  if (v.empty()) return std::nullopt;
  const std::string text(v);
  char* end = nullptr;
  const double d = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) return std::nullopt;
  if (std::isnan(d) || std::isinf(d)) return std::nullopt;  // only the spellings above
  return d;
}

// The family a sample name belongs to, given the families typed so far.
inline std::string familyOf(const std::string& name, const std::map<std::string, PromFamily>& families) {
  for (std::string_view suffix : {"_bucket", "_sum", "_count"}) {
    if (name.size() > suffix.size() && name.ends_with(suffix)) {
      const std::string base = name.substr(0, name.size() - suffix.size());
      auto it = families.find(base);
      if (it != families.end() && it->second.type == "histogram") return base;
    }
  }
  return name;
}

inline void checkHistogram(const PromFamily& f, std::vector<std::string>& errors) {
  // Group by the labels other than le.
  struct Series {
    std::vector<std::pair<double, double>> buckets;  // (le, count) in order written
    std::optional<double> sum, count;
  };
  std::map<std::map<std::string, std::string>, Series> series;
  for (const PromSample& s : f.samples) {
    std::map<std::string, std::string> key = s.labels;
    if (s.name == f.name + "_bucket") {
      auto le = key.find("le");
      if (le == key.end()) {
        errors.push_back(f.name + ": a bucket without le");
        continue;
      }
      auto bound = parseValue(le->second);
      if (!bound) {
        errors.push_back(f.name + ": le=\"" + le->second + "\" is not a number");
        continue;
      }
      key.erase(le);
      series[key].buckets.emplace_back(*bound, s.value);
    } else if (s.name == f.name + "_sum") {
      series[key].sum = s.value;
    } else if (s.name == f.name + "_count") {
      series[key].count = s.value;
    } else {
      errors.push_back(f.name + ": sample " + s.name + " in a histogram");
    }
  }
  for (const auto& [labels, h] : series) {
    if (h.buckets.empty() || !std::isinf(h.buckets.back().first)) {
      errors.push_back(f.name + ": no +Inf bucket (or not the last)");
      continue;
    }
    for (size_t i = 1; i < h.buckets.size(); ++i) {
      if (!(h.buckets[i].first > h.buckets[i - 1].first)) errors.push_back(f.name + ": bounds not increasing");
      if (h.buckets[i].second < h.buckets[i - 1].second) errors.push_back(f.name + ": bucket counts not cumulative");
    }
    if (!h.sum) errors.push_back(f.name + ": no _sum");
    if (!h.count) {
      errors.push_back(f.name + ": no _count");
    } else if (*h.count != h.buckets.back().second) {
      errors.push_back(f.name + ": _count differs from the +Inf bucket");
    }
  }
}

}  // namespace prom_detail

inline PromText parsePrometheusText(std::string_view text) {
  using namespace prom_detail;
  PromText out;
  auto& errors = out.errors;
  if (!text.empty() && text.back() != '\n') errors.push_back("the text does not end with a newline");
  std::set<std::string> helped, typed, closed;
  std::string current;  // the family whose samples are being read
  std::set<std::string> series_seen;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    const std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    const std::string where = "line " + std::to_string(line_no) + " (" + std::string(line.substr(0, 120)) + "): ";
    if (line.empty()) continue;
    if (line[0] == '#') {
      const bool help = line.starts_with("# HELP ");
      const bool type = line.starts_with("# TYPE ");
      if (!help && !type) continue;  // another comment
      const std::string_view rest = line.substr(7);
      const size_t end = readName(rest, 0, true);
      if (end == 0 || (end < rest.size() && rest[end] != ' ')) {
        errors.push_back(where + "bad metric name");
        continue;
      }
      const std::string name(rest.substr(0, end));
      const std::string_view arg = end < rest.size() ? rest.substr(end + 1) : std::string_view();
      if (closed.contains(name)) errors.push_back(where + "family " + name + " appears again after other families");
      if (name != current) {
        if (!current.empty()) closed.insert(current);
        current = name;
      }
      PromFamily& f = out.families[name];
      f.name = name;
      if (help) {
        if (!helped.insert(name).second) errors.push_back(where + "second HELP");
        std::string h;
        for (size_t i = 0; i < arg.size(); ++i) {
          if (arg[i] == '\\' && i + 1 < arg.size() && (arg[i + 1] == '\\' || arg[i + 1] == 'n')) {
            h += arg[i + 1] == 'n' ? '\n' : '\\';
            ++i;
          } else if (arg[i] == '\\') {
            errors.push_back(where + "bad escape in HELP");
          } else {
            h += arg[i];
          }
        }
        f.help = h;
      } else {
        if (!typed.insert(name).second) errors.push_back(where + "second TYPE");
        if (!f.samples.empty()) errors.push_back(where + "TYPE after samples");
        if (arg != "counter" && arg != "gauge" && arg != "histogram" && arg != "summary" && arg != "untyped") {
          errors.push_back(where + "unknown type");
        }
        f.type = std::string(arg);
        if (f.type == "counter" && !name.ends_with("_total")) errors.push_back(where + "a counter not named _total");
      }
      continue;
    }
    // A sample.
    PromSample s;
    size_t i = readName(line, 0, true);
    if (i == 0) {
      errors.push_back(where + "bad metric name");
      continue;
    }
    s.name = std::string(line.substr(0, i));
    bool ok = true;
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (ok && i < line.size() && line[i] != '}') {
        const size_t ne = readName(line, i, false);
        if (ne == i || ne >= line.size() || line[ne] != '=' || ne + 1 >= line.size() || line[ne + 1] != '"') {
          errors.push_back(where + "bad label");
          ok = false;
          break;
        }
        const std::string lname(line.substr(i, ne - i));
        if (lname.starts_with("__")) errors.push_back(where + "reserved label name " + lname);
        i = ne + 2;
        std::string value;
        bool closed_quote = false;
        while (i < line.size()) {
          const char c = line[i];
          if (c == '\\') {
            if (i + 1 >= line.size()) break;
            const char e = line[i + 1];
            if (e == '\\') value += '\\';
            else if (e == '"') value += '"';
            else if (e == 'n') value += '\n';
            else {
              errors.push_back(where + "bad escape in a label value");
              ok = false;
            }
            i += 2;
          } else if (c == '"') {
            closed_quote = true;
            ++i;
            break;
          } else {
            value += c;
            ++i;
          }
        }
        if (!closed_quote) {
          errors.push_back(where + "unterminated label value");
          ok = false;
          break;
        }
        if (!s.labels.emplace(lname, value).second) errors.push_back(where + "label " + lname + " twice");
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (!ok) continue;
      if (i >= line.size() || line[i] != '}') {
        errors.push_back(where + "no closing brace");
        continue;
      }
      ++i;
    }
    if (i >= line.size() || line[i] != ' ') {
      errors.push_back(where + "no space before the value");
      continue;
    }
    std::string_view rest = line.substr(i + 1);
    const size_t sp = rest.find(' ');
    const std::string_view value_text = rest.substr(0, sp);
    if (sp != std::string_view::npos) {
      const std::string_view ts = rest.substr(sp + 1);
      if (ts.empty() || ts.find_first_not_of("-0123456789") != std::string_view::npos) {
        errors.push_back(where + "bad timestamp");
      }
    }
    const auto v = parseValue(value_text);
    if (!v) {
      errors.push_back(where + "bad value");
      continue;
    }
    s.value = *v;
    const std::string family = familyOf(s.name, out.families);
    if (!typed.contains(family) || !helped.contains(family)) {
      errors.push_back(where + "a sample of " + family + " without HELP and TYPE before it");
    }
    if (family != current) {
      if (closed.contains(family)) errors.push_back(where + "samples of " + family + " are not contiguous");
      if (!current.empty()) closed.insert(current);
      current = family;
    }
    std::string key = s.name + "{";
    for (const auto& [k, val] : s.labels) key += k + "=" + val + "\x1f";
    if (!series_seen.insert(key).second) errors.push_back(where + "series written twice");
    if (out.families[family].type == "histogram" && s.name == family) {
      errors.push_back(where + "a histogram sample without _bucket, _sum or _count");
    }
    out.families[family].name = family;
    out.families[family].samples.push_back(std::move(s));
  }
  for (const auto& [name, f] : out.families) {
    if (f.type == "histogram") checkHistogram(f, errors);
  }
  return out;
}

}  // namespace lg::test

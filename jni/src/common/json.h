// The JSON text and the statistics of the native reports (timings, profiles, cache counters, device
// descriptions): the runtime, the RPC server, the profiler, tvmgen-run and both GPU backends write their
// JSON by hand (no JSON library on a phone), so the escaping rule lives here once.
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace tvmgen {

// `s` as the inside of a JSON string: quotes and backslashes escaped, control characters as \u00XX (a
// driver's message may hold a newline).
inline std::string JsonEscape(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      o += buf;
    } else {
      o += c;
    }
  }
  return o;
}

// `s` as a JSON string, quotes included.
inline std::string JsonString(const std::string& s) { return "\"" + JsonEscape(s) + "\""; }

// The median of timed runs: the middle sample, of an even count the upper one (always a time some run took);
// 0 for none.
inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace tvmgen

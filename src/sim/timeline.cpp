#include "tilelink/sim/timeline.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "tilelink/core/error.hpp"

namespace tilelink::sim {

void check_world(const char* where, int world, int nodes) {
  TL_REQUIRE(world >= 1 && world <= 4096, where, "world", world, "1 to 4096 ranks");
  TL_REQUIRE(nodes >= 1 && world % nodes == 0, where, "nodes", nodes,
             "a divisor of world (" + std::to_string(world) + ")");
}

void check_across_nodes(const char* where, int nodes, bool runs, const char* arg, const std::string& value,
                        const std::string& expected) {
  TL_REQUIRE(nodes == 1 || runs, where, arg, value,
             expected + " with nodes > 1: across nodes the world's transport is put_signal (auto), under which "
                        "kernels that load or store peers' memory are refused");
}

void check_split(const char* where, const char* name, uint32_t value, int world, const char* why) {
  TL_REQUIRE(value > 0 && value % uint32_t(world) == 0, where, name, value,
             "a positive multiple of world (" + std::to_string(world) + "): " + why);
}

namespace {

// Lanes in order of first appearance.
struct Lanes {
  std::vector<std::string> names;
  int id(const std::string& lane) {
    auto it = std::find(names.begin(), names.end(), lane);
    if (it != names.end()) return int(it - names.begin());
    names.push_back(lane);
    return int(names.size() - 1);
  }
};

std::string quoted(const std::string& s) {
  std::string q = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') q += '\\';
    q += ch;
  }
  return q + "\"";
}

std::string xml_escaped(const std::string& s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += ch;
    }
  }
  return out;
}

}  // namespace

std::vector<Interval> trace_intervals(std::vector<TraceRecord> records, const std::string& lane_prefix,
                                      uint64_t t0_ns) {
  std::sort(records.begin(), records.end(), [](const TraceRecord& a, const TraceRecord& b) {
    if (a.rank != b.rank) return a.rank < b.rank;
    if (a.role != b.role) return a.role < b.role;
    if (a.block != b.block) return a.block < b.block;
    return a.start_ns < b.start_ns;
  });
  uint64_t t0 = t0_ns != 0 ? t0_ns : ~0ull;
  if (t0_ns == 0) {
    for (const TraceRecord& r : records) t0 = std::min(t0, r.start_ns);
  }
  std::vector<Interval> out;
  out.reserve(records.size());
  for (const TraceRecord& r : records) {
    static const char* const kRole[] = {"P", "C", "comm"};
    const char* kind_prefix = r.role == static_cast<uint16_t>(TraceRole::kComm) ? " b" : " c";
    const std::string lane = lane_prefix + "r" + std::to_string(r.rank) + kind_prefix + std::to_string(r.block) + " " +
                             (r.role < 3 ? kRole[r.role] : "?");
    std::string name = to_string(static_cast<TraceKind>(r.kind));
    if (r.tile != 0xFFFFFFFFu) name += " " + std::to_string(r.tile);
    out.push_back({lane, name, double(r.start_ns - t0) * 1e-9, double(std::max(r.end_ns, r.start_ns) - t0) * 1e-9});
  }
  return out;
}

std::string to_chrome_trace(const std::vector<Interval>& timeline, const std::string& process_name) {
  Lanes lanes;
  std::ostringstream os;
  os << "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[";
  os << "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{\"name\":" << quoted(process_name) << "}}";
  char num[64];
  for (const Interval& e : timeline) {
    const int tid = lanes.id(e.lane);
    std::snprintf(num, sizeof(num), "%.4f,\"dur\":%.4f", e.start * 1e6, (e.end - e.start) * 1e6);
    os << ",{\"name\":" << quoted(e.name) << ",\"cat\":\"tilelink\",\"ph\":\"X\",\"pid\":0,\"tid\":" << tid
       << ",\"ts\":" << num << "}";
  }
  for (size_t i = 0; i < lanes.names.size(); ++i) {
    os << ",{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":" << i << ",\"args\":{\"name\":"
       << quoted(lanes.names[i]) << "}}";
  }
  os << "]}";
  return os.str();
}

std::string to_svg(const std::vector<Interval>& timeline, const std::string& title) {
  Lanes lanes;
  double end = 0;
  for (const Interval& e : timeline) {
    lanes.id(e.lane);
    end = std::max(end, e.end);
  }
  constexpr double kLeft = 80, kWidth = 1000, kRow = 14, kTop = 30;
  const double scale = end > 0 ? kWidth / end : 0;
  const double height = kTop + kRow * double(lanes.names.size()) + 20;
  std::ostringstream os;
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"monospace\" "
                "font-size=\"10\">\n",
                kLeft + kWidth + 20, height);
  os << buf << "<text x=\"4\" y=\"14\">" << xml_escaped(title) << "</text>\n";
  for (size_t i = 0; i < lanes.names.size(); ++i) {
    std::snprintf(buf, sizeof(buf), "<text x=\"4\" y=\"%.1f\">", kTop + kRow * double(i) + 10);
    os << buf << xml_escaped(lanes.names[i]) << "</text>\n";
  }
  for (const Interval& e : timeline) {
    const int lane = lanes.id(e.lane);
    std::snprintf(buf, sizeof(buf),
                  "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" stroke=\"white\" "
                  "stroke-width=\"0.3\"><title>",
                  kLeft + e.start * scale, kTop + kRow * lane, std::max(0.5, (e.end - e.start) * scale), kRow - 2,
                  e.lane == "comm" ? "#d9822b" : "#2b6cb0");
    os << buf << xml_escaped(e.name) << "</title></rect>\n";
  }
  std::snprintf(buf, sizeof(buf), "<text x=\"%.0f\" y=\"%.0f\">%.1f µs</text>\n", kLeft + kWidth - 60, height - 4,
                end * 1e6);
  os << buf << "</svg>\n";
  return os.str();
}

std::string to_bar_chart_svg(const std::string& title, const std::vector<std::string>& labels,
                             const std::vector<ChartSeries>& series, const std::string& y_label, double reference) {
  for (const ChartSeries& c : series) {
    if (c.values.size() != labels.size()) {
      throw InvalidArgument("to_bar_chart_svg: series '" + c.name + "' has " + std::to_string(c.values.size()) +
                            " values: expected one per label (" + std::to_string(labels.size()) + ")");
    }
  }
  static const char* kColors[] = {"#2b6cb0", "#d9822b", "#38a169", "#805ad5", "#c53030"};
  constexpr double kLeft = 60, kTop = 40, kPlot = 260, kBar = 22, kGap = 26;
  double top = reference;
  for (const ChartSeries& c : series) {
    for (double v : c.values) {
      if (std::isfinite(v)) top = std::max(top, v);
    }
  }
  top = top > 0 ? top * 1.15 : 1;
  const double group = kBar * double(std::max<size_t>(series.size(), 1)) + kGap;
  const double width = kLeft + group * double(labels.size()) + 20;
  const double height = kTop + kPlot + 70 + 16 * double(series.size());
  auto y_of = [&](double v) { return kTop + kPlot * (1 - v / top); };
  std::ostringstream os;
  char buf[320];
  std::snprintf(buf, sizeof(buf),
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"monospace\" "
                "font-size=\"10\">\n",
                std::max(width, 400.0), height);
  os << buf << "<text x=\"4\" y=\"14\">" << xml_escaped(title) << "</text>\n";
  std::snprintf(buf, sizeof(buf), "<text x=\"4\" y=\"%.0f\">", kTop - 6);
  os << buf << xml_escaped(y_label) << "</text>\n";
  std::snprintf(buf, sizeof(buf),
                "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"black\" stroke-dasharray=\"4 3\"/>\n"
                "<text x=\"4\" y=\"%.1f\">%.2f</text>\n",
                kLeft, y_of(reference), width - 10, y_of(reference), y_of(reference) + 3, reference);
  os << buf;
  for (size_t i = 0; i < labels.size(); ++i) {
    const double x0 = kLeft + group * double(i) + kGap / 2;
    for (size_t s = 0; s < series.size(); ++s) {
      const double v = series[s].values[i];
      if (!std::isfinite(v)) continue;
      const double x = x0 + kBar * double(s);
      std::snprintf(buf, sizeof(buf),
                    "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>",
                    x, y_of(v), kBar - 2, kTop + kPlot - y_of(v), kColors[s % 5]);
      os << buf << xml_escaped(series[s].name + " " + labels[i]);
      std::snprintf(buf, sizeof(buf), ": %.3f</title></rect>\n<text x=\"%.1f\" y=\"%.1f\" font-size=\"8\">%.2f</text>\n",
                    v, x, y_of(v) - 2, v);
      os << buf;
    }
    std::snprintf(buf, sizeof(buf), "<text x=\"%.1f\" y=\"%.1f\" font-size=\"9\">", x0, kTop + kPlot + 14);
    os << buf << xml_escaped(labels[i]) << "</text>\n";
  }
  for (size_t s = 0; s < series.size(); ++s) {
    const double y = kTop + kPlot + 40 + 16 * double(s);
    std::snprintf(buf, sizeof(buf), "<rect x=\"%.0f\" y=\"%.1f\" width=\"10\" height=\"10\" fill=\"%s\"/><text x=\"%.0f\" y=\"%.1f\">",
                  kLeft, y - 9, kColors[s % 5], kLeft + 16, y);
    os << buf << xml_escaped(series[s].name) << "</text>\n";
  }
  os << "</svg>\n";
  return os.str();
}

}  // namespace tilelink::sim

#include "tilelink/sim/timeline.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "tilelink/core/error.hpp"

namespace tilelink::sim {

void check_world(const char* where, int world, int nodes) {
  TL_REQUIRE(world >= 1 && world <= 4096, where, "world", world, "1 to 4096 ranks");
  TL_REQUIRE(nodes >= 1 && world % nodes == 0, where, "nodes", nodes,
             "a divisor of world (" + std::to_string(world) + ")");
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

}  // namespace tilelink::sim

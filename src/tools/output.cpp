#include "tools/output.hpp"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <fstream>
#include <map>
#include <variant>

#include "bench/harness.hpp"
#include "bench/world_choice.hpp"

#ifndef TILELINK_VERSION
#define TILELINK_VERSION "unknown"
#endif

namespace tilelink::tool {

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string cuda_version(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

void print_device_header(int world, const std::string& what) {
  const tb::DeviceInfo d = tb::query_device(0);
  std::cout << "tilelink " << what << ": " << d.name << " (sm_" << d.cc_major << d.cc_minor << ", " << d.sms
            << " SMs), " << tb::ranks_placement(world) << "\n\n";
}

tb::Fields run_meta(const std::string& line, uint64_t seed) {
  const tb::DeviceInfo d = tb::query_device(0);
  return {{"tool", std::string("tilelink " TILELINK_VERSION)},
          {"command", line},
          {"date_utc", utc_now()},
          {"device", d.name},
          {"compute_capability", std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor)},
          {"sms", int64_t(d.sms)},
          {"driver", cuda_version(d.driver_version)},
          {"runtime", cuda_version(d.runtime_version)},
          {"seed", std::to_string(seed)}};
}

void finish(const std::vector<tb::Table>& tables, const tb::Fields& meta, const std::string& json) {
  if (json.empty()) return;
  tb::write_json(json, meta, tables);
  std::cout << "wrote " << json << "\n";
}

void print_progress(size_t done, size_t total, const LabeledMnk& next) {
  constexpr size_t kWidth = 24;
  const size_t filled = total == 0 ? kWidth : done * kWidth / total;
  std::cerr << "[" << std::string(filled, '#') << std::string(kWidth - filled, '-') << "] " << done << "/" << total
            << " " << next.label << " (" << next.shape.m << ", " << next.shape.n << ", " << next.shape.k << ")\n";
}

void write_speedup_chart(const std::string& path, const std::string& title, const std::vector<LabeledMnk>& shapes,
                         const std::vector<tb::Table>& tables) {
  sim::ChartSeries vs_non{"fused vs non-overlapped", {}}, vs_ideal{"ideal / fused", {}};
  std::vector<std::string> labels;
  for (size_t i = 0; i < tables.size(); ++i) {
    labels.push_back(shapes[i].label);
    double non = std::nan(""), ideal = std::nan("");
    for (const auto& row : tables[i].rows) {
      const auto* name = std::get_if<std::string>(&row.front());
      if (name != nullptr && name->rfind("tilelink fused", 0) == 0) {
        non = std::get<double>(row[6]);
        ideal = std::get<double>(row[7]);
      }
    }
    vs_non.values.push_back(non);
    vs_ideal.values.push_back(ideal);
  }
  std::ofstream(path) << sim::to_bar_chart_svg(title, labels, {vs_non, vs_ideal}, "speedup", 1.0);
  std::cout << "wrote " << path << " (SVG chart of the fused op's speedups)\n";
}

void write_timeline(const std::vector<sim::Interval>& timeline, const std::string& trace, const std::string& svg,
                    const std::string& title) {
  if (!trace.empty()) {
    std::ofstream(trace) << sim::to_chrome_trace(timeline, title);
    std::cout << "wrote " << trace << " (Chrome / Perfetto trace)\n";
  }
  if (!svg.empty()) {
    std::ofstream(svg) << sim::to_svg(timeline, title);
    std::cout << "wrote " << svg << " (SVG timeline)\n";
  }
}

std::string hidden_note(double t_comp, double t_comm, double non_overlapped, double fused) {
  char note[160];
  std::snprintf(note, sizeof(note), "T_comp %.1f µs, T_comm %.1f µs; communication hidden: %.0f %%", t_comp * 1e6,
                t_comm * 1e6, t_comm > 0 ? 100.0 * std::clamp((non_overlapped - fused) / t_comm, 0.0, 1.0) : 100.0);
  return note;
}

int report_trace(const TraceResult& r, const std::string& op, int world, const TraceOutputs& out) {
  std::map<std::string, uint64_t> kinds;
  for (const TraceRecord& rec : r.records) ++kinds[to_string(static_cast<TraceKind>(rec.kind))];
  std::cout << "records: " << r.records.size() << " (";
  const char* sep = "";
  for (const auto& [kind, count] : kinds) {
    std::cout << sep << count << " " << kind;
    sep = ", ";
  }
  std::cout << ")" << (r.dropped > 0 ? ", " + std::to_string(r.dropped) + " dropped (raise --capacity)" : "") << "\n";
  std::printf("call time: %.1f µs untraced, %.1f µs traced (median of %zu): recording costs %+.1f %%\n",
              r.untraced.median, r.traced.median, r.traced.samples,
              100.0 * (r.traced.median / r.untraced.median - 1.0));
  std::cout << r.checked << ": " << r.tiles - r.violations << " of " << r.tiles << "\n";
  for (const std::string& rate : r.rates) std::cout << "measured, " << rate << "\n";
  std::vector<sim::Interval> timeline;
  if (r.parts.empty()) {
    timeline = sim::trace_intervals(r.records);
  } else {  // each part's lanes after its name, on one clock
    uint64_t t0 = ~0ull;
    for (const TraceRecord& rec : r.records) t0 = std::min(t0, rec.start_ns);
    size_t at = 0;
    for (const auto& [name, count] : r.parts) {
      const std::vector<TraceRecord> part(r.records.begin() + static_cast<std::ptrdiff_t>(at),
                                          r.records.begin() + static_cast<std::ptrdiff_t>(at + count));
      const std::vector<sim::Interval> lanes = sim::trace_intervals(part, name + " ", t0);
      timeline.insert(timeline.end(), lanes.begin(), lanes.end());
      at += count;
    }
  }
  write_timeline(timeline, out.trace, out.svg,
                 "tilelink trace " + op + " (measured, " + std::to_string(world) + " ranks)");
  return r.violations == 0 && r.dropped == 0 ? 0 : 1;
}

std::string tune_header(const char* op, int world, int sms, const Mnk& s, DType dtype, Fp8Scaling scaling) {
  const std::string operands =
      dtype == DType::kE4m3 ? std::string(", e4m3 (") + to_string(scaling) + " scaling)" : std::string();
  return std::string("== tune ") + op + " (dry run), world " + std::to_string(world) + ", m=" + std::to_string(s.m) +
         " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) + operands + ", " + std::to_string(sms / world) +
         " SMs per rank ==\n";
}

}  // namespace tilelink::tool

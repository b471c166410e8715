// What the tool's commands print and write, shared by all of them: the device header, the
// measured tables (one per shape, a sweep's progress and chart) and their JSON file, a plan's
// table and timeline files, a trace's report, a tune search's candidates.
#pragma once

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "bench/report.hpp"
#include "tilelink/sim/timeline.hpp"
#include "tools/models.hpp"
#include "tools/options.hpp"
#include "tools/trace_runner.hpp"

namespace tilelink::tool {

// Now, UTC, ISO 8601.
std::string utc_now();
// CUDA encodes versions as 1000 * major + 10 * minor: "13.0".
std::string cuda_version(int v);

// "tilelink <what>: <device> (sm_90, 132 SMs), <where the ranks run>" and a blank line.
void print_device_header(int world, const std::string& what);

// The JSON file's "meta": tool, command line, date, device, driver, runtime, seed.
tb::Fields run_meta(const std::string& line, uint64_t seed);
// Writes the tables to `json` (when named) and says so.
void finish(const std::vector<tb::Table>& tables, const tb::Fields& meta, const std::string& json);

// "[#####-----] 3/6 llama3-70b (8192, 28672, 8192)" on stderr, before each shape of a sweep.
void print_progress(size_t done, size_t total, const LabeledMnk& next);
// The fused row's speedups of each table as an SVG bar chart.
void write_speedup_chart(const std::string& path, const std::string& title, const std::vector<LabeledMnk>& shapes,
                         const std::vector<tb::Table>& tables);

// One table per shape, printed as it is measured, then the JSON file if asked. A sweep (labeled
// shapes) shows a progress bar and, with `svg`, charts the speedups.
template <class Bench>
std::vector<tb::Table> run_shapes(int world, const std::string& what, const std::vector<Mnk>& shapes,
                                  const std::string& line, uint64_t seed, const std::string& json, Bench&& bench,
                                  const std::vector<LabeledMnk>& sweep = {}, const std::string& svg = "") {
  print_device_header(world, what);
  std::vector<tb::Table> tables;
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (!sweep.empty()) print_progress(i, shapes.size(), sweep[i]);
    tables.push_back(bench(shapes[i]));
    tb::print_table(std::cout, tables.back());
    std::cout.flush();
  }
  if (!sweep.empty()) {
    std::cerr << "[" << std::string(24, '#') << "] " << shapes.size() << "/" << shapes.size() << " done\n";
  }
  finish(tables, run_meta(line, seed), json);
  if (!svg.empty()) write_speedup_chart(svg, what + ", world " + std::to_string(world), sweep, tables);
  return tables;
}

// The same for an op of one shape: `bench()` gives its table.
template <class Bench>
int run_once(int world, const std::string& what, const std::string& line, uint64_t seed, const std::string& json,
             Bench&& bench) {
  check_writable(json);
  run_shapes(world, what, {Mnk{}}, line, seed, json, [&](const Mnk&) { return bench(); });
  return 0;
}

// A timeline as a Chrome / Perfetto trace and an SVG picture (each only if its file is named).
void write_timeline(const std::vector<sim::Interval>& timeline, const std::string& trace, const std::string& svg,
                    const std::string& title);

// "T_comp 1.0 µs, T_comm 2.0 µs; communication hidden: 50 %" (a plan table's note).
std::string hidden_note(double t_comp, double t_comm, double non_overlapped, double fused);

// The table of a plan command (non-overlapped, decomposed where the model has it, fused, ideal),
// its timeline files and its JSON (meta.kind "prediction").
template <class Prediction>
// `alternatives`: further fused variants (label, predicted seconds) printed after the op's row,
// e.g. a configuration the op does not take by default.
void print_plan(const std::string& name, const std::string& title, const Prediction& r, const PlanOutputs& out,
                const std::string& timeline_title,
                const std::vector<std::pair<std::string, double>>& alternatives = {}) {
  tb::Table table;
  table.name = name;
  table.title = title;
  table.columns = {{"variant", "variant", 0}, {"time_us", "time µs", 1}, {"tflops", "TFLOP/s", 1},
                   {"vs_ideal", "time / ideal", 3}};
  auto row = [&](const std::string& variant, double t) {
    table.add_row({variant, t * 1e6, r.flop / t / 1e12, t / r.ideal});
  };
  row("non-overlapped", r.non_overlapped);
  if constexpr (requires { r.decomposed; }) row("decomposed", r.decomposed);
  row("fused (tilelink)", r.fused);
  for (const auto& [label, t] : alternatives) row(label, t);
  row("ideal max(comp, comm)", r.ideal);
  table.notes.push_back(hidden_note(r.t_comp, r.t_comm, r.non_overlapped, r.fused));
  tb::print_table(std::cout, table);
  write_timeline(r.timeline, out.trace, out.svg, timeline_title);
  finish({table}, {{"kind", std::string("prediction")}, {"model", std::string("tilelink plan cost model")}}, out.json);
}

// What `tilelink trace <op>` prints and writes for one traced call: records by kind, the
// recording overhead, the op's ordering check (TraceResult::checked), the timeline files. Exit
// status 1 if the check failed or records were dropped.
int report_trace(const TraceResult& r, const std::string& op, int world, const TraceOutputs& out);

// The steps every `tilelink trace <op>` shares around `record` (the traced call; it returns the
// TraceResult and prints the op's one-line description).
template <class Record>
int run_trace(const TraceOutputs& out, const std::string& op, int world, Record&& record) {
  check_writable(out.trace);
  check_writable(out.svg);
  print_device_header(world, "trace " + op);
  const TraceResult r = record();
  return report_trace(r, op, world, out);
}

// "== tune <op> (dry run), world W, m=M n=N k=K, S SMs per rank ==": the GEMMs' dry-run header
// for a GPU of `sms` SMs.
std::string tune_header(const char* op, int world, int sms, const Mnk& s, DType dtype = DType::kBf16,
                        Fp8Scaling scaling = Fp8Scaling::kRow);

// --dry-run of `tune <op>`: the candidates the search would time, with the plan model's
// predictions; no GPU. `stages`: the unranked stages' labels and candidates (each around the
// all-automatic configuration, stages[0][0]); `comm(base)` ranks the last stage's around it.
template <class Config, class Comm>
void print_tune_candidates(const std::string& header,
                           const std::vector<std::pair<const char*, std::vector<Config>>>& stages, Comm&& comm) {
  std::cout << header;
  for (const auto& [label, configs] : stages) {
    for (const auto& c : configs) std::printf("%-13s %s\n", label, describe(c).c_str());
  }
  for (const auto& c : comm(stages.front().second.front())) {
    std::printf("communication %s  (predicted %.1f us)\n", describe(c.config).c_str(), c.predicted_us);
  }
}

}  // namespace tilelink::tool

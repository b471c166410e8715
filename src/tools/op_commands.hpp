// The commands every op's file instantiates (the CUTLASS profiler's OperationProfiler, as
// templates): bench, trace and tune of an op's run options, the two GEMM ops' commands over
// (m, n, k) shapes, and the plans. An op's file supplies its RunArgs, derived from
// RunArgsBase<Options> (Options: the op's tb::<Op>BenchOptions), with
//
//   void add_to(Command&, Timed);  // --world, the problem, the knobs (unless !with_knobs), timing, --seed
//   Options resolved() const;      // the options as run: models applied, the tune cache off when a
//                                  // knob was given
//
// and each command starts from a copy of `prototype`, before any option is added.
#pragma once

#include <iostream>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "tools/command.hpp"
#include "tools/models.hpp"
#include "tools/options.hpp"
#include "tools/output.hpp"
#include "tools/trace_runner.hpp"
#include "tools/tune_runner.hpp"
#include "tune/model_config.hpp"

namespace tilelink::tool {

// What every RunArgs holds: the op's bench options (3 warm-up and 10 timed calls unless a command
// says), whether its command takes the knobs, and their group once added.
template <class Options>
struct RunArgsBase {
  Options o;
  bool with_knobs = true;
  CLI::Option_group* knobs = nullptr;
  RunArgsBase() { o.timing = {3, 10}; }
};

// A command's arguments: the op's run options and the command's own options beside them.
template <class RunArgs, class Own>
struct ArgsWith : RunArgs, Own {
  explicit ArgsWith(const RunArgs& r) : RunArgs(r) {}
};
struct JsonOption {
  std::string json;
};
struct TuneOwn {
  TuneSearch search;
  std::string json;
};

// `bench <name>`: the op's options, `more(command, args)` (the command's own), --json; runs
// `bench(options)` once.
template <class RunArgs, class Bench, class More>
void add_bench_command(Tool& tool, const RunArgs& prototype, const char* name, const char* help, Bench bench,
                       More more) {
  auto a = std::make_shared<ArgsWith<RunArgs, JsonOption>>(prototype);
  Command& c = tool.add("bench", name, help);
  a->add_to(c, Timed::kBench);
  more(c, static_cast<RunArgs&>(*a));
  add_json(c.app, a->json);
  c.run = [a, name, bench](const std::string& line) {
    const auto o = a->resolved();
    return run_once(o.world, std::string("bench ") + name, line, o.seed, a->json, [&] { return bench(o); });
  };
}

template <class RunArgs, class Bench>
void add_bench_command(Tool& tool, const RunArgs& prototype, const char* name, const char* help, Bench bench) {
  add_bench_command(tool, prototype, name, help, bench, [](Command&, RunArgs&) {});
}

// `trace <name>`: the op's options and the trace's outputs; `trace(options)` records one call,
// and `describe(options)` is the line printed before its configuration.
template <class RunArgs, class Trace, class Describe>
void add_trace_command(Tool& tool, const RunArgs& prototype, const char* name, const char* help,
                       const char* capacity_help, Trace trace, Describe describe) {
  auto a = std::make_shared<ArgsWith<RunArgs, TraceOutputs>>(prototype);
  Command& c = tool.add("trace", name, help);
  a->RunArgs::add_to(c, Timed::kTrace);
  a->TraceOutputs::add_to(c.app, capacity_help);
  c.run = [a, name, trace, describe](const std::string&) {
    const TraceOutputs& out = *a;
    const TraceOptions<decltype(a->resolved())> o{a->resolved(), out.capacity};
    return run_trace(out, name, o.op.world, [&] {
      TraceResult r = trace(o);
      std::cout << describe(o.op) << ", " << r.config << "\n";
      return r;
    });
  };
}

// `tune <name>` of an op of one shape: the op's problem (no knobs), --json and the search's
// options; `dry_run(options, search)` prints the candidates, `tune(TuneOptions, progress)` runs
// the search.
template <class RunArgs, class DryRun, class Tune>
void add_tune_command(Tool& tool, const RunArgs& prototype, const char* name, const char* help,
                      const char* dry_run_help, DryRun dry_run, Tune tune) {
  auto a = std::make_shared<ArgsWith<RunArgs, TuneOwn>>(prototype);
  a->with_knobs = false;
  a->o.timing = {2, 5};
  a->o.seed = 0;  // a dry run's (MoE: its routing's); a search on the GPU draws a fresh one unless given
  Command& c = tool.add("tune", name, help);
  a->add_to(c, Timed::kTune);
  add_json(c.app, a->json);
  a->search.add_to(c.app, dry_run_help);
  c.needs_gpu = [a] { return !a->search.dry_run; };
  c.run = [a, name, dry_run, tune](const std::string& line) {
    const TuneOptions<decltype(a->resolved())> o{a->resolved(), a->search.top, a->search.cache};
    if (a->search.dry_run) return dry_run(o.op, a->search);
    return run_once(o.op.world, std::string("tune ") + name, line, o.op.seed, a->json,
                    [&] { return tune(o, std::cout); });
  };
}

// ---- the GEMM ops (AG+GEMM, GEMM+RS): bench and tune over (m, n, k) shapes ------------------------

// What differs between the two GEMM ops' commands. Options: tb::AgGemmBenchOptions or
// tb::GemmRsBenchOptions.
template <class Options>
struct GemmOp {
  using Config = decltype(Options::config);
  const char* name;                     // "ag_gemm"
  bool row_parallel;                    // the models' sweep: M x H x I (GEMM+RS) or M x I x H
  const std::vector<Mnk>& (*paper)();   // the paper's three shapes
  const char* m_help;
  const char* n_help;
  const char* k_help;
  void (*add_knobs)(CLI::App*, Config&, CLI::Option_group*&);  // the op's configuration options
  // What --dtype e4m3 means for the op's bench, tune and trace (Options has dtype and scaling);
  // nullptr: bf16 only.
  const char* fp8_what = nullptr;
};

// The op's --dtype and --scaling where it has FP8 operands.
template <class Options>
void add_gemm_operands(CLI::App* app, const GemmOp<Options>& op, Options& o) {
  if constexpr (requires { o.dtype; o.scaling; }) {
    if (op.fp8_what != nullptr) add_operand_options(app, o.dtype, o.scaling, op.fp8_what);
  }
}

// The run options of a GEMM op's trace (one shape, the knobs).
template <class Options>
struct GemmRunArgs : RunArgsBase<Options> {
  using RunArgsBase<Options>::o;
  using RunArgsBase<Options>::with_knobs;
  using RunArgsBase<Options>::knobs;
  const GemmOp<Options>* op = nullptr;
  explicit GemmRunArgs(const GemmOp<Options>* op_) : op(op_) {}

  void add_to(Command& c, Timed timed) {
    add_world(c.app, o.world);
    c.app->add_option("--m", o.m, op->m_help)->capture_default_str()->check(CLI::PositiveNumber);
    c.app->add_option("--n", o.n, op->n_help)->capture_default_str()->check(CLI::PositiveNumber);
    c.app->add_option("--k", o.k, op->k_help)->capture_default_str()->check(CLI::PositiveNumber);
    if (with_knobs) op->add_knobs(c.app, o.config, knobs);
    add_gemm_operands(c.app, *op, o);
    add_timing(c.app, o.timing, timed);
    c.seed = add_seed(c.app, o.seed);
  }
  Options resolved() const {
    Options r = o;
    r.config.use_tune_cache = !any_knob(knobs);
    return r;
  }
};

// `bench <op>` over the shapes asked for: one, the paper's or the models' sweep (with a chart);
// `after(options, shapes, tables)` follows the tables (ag_gemm's --explain).
template <class Options, class Bench, class More, class After>
void add_gemm_bench(Tool& tool, const GemmOp<Options>& op, const char* help, Bench bench, More more, After after) {
  struct Args {
    Options o;
    ShapeChoice shapes;
    CLI::Option_group* knobs = nullptr;
    std::string json;
  };
  auto a = std::make_shared<Args>();
  a->shapes.one = {a->o.m, a->o.n, a->o.k};
  Command& c = tool.add("bench", op.name, help);
  add_world(c.app, a->o.world);
  add_shape_options(c.app, a->shapes, op.paper(), op.m_help, op.n_help, op.k_help, op.name, true);
  op.add_knobs(c.app, a->o.config, a->knobs);
  add_gemm_operands(c.app, op, a->o);
  add_timing(c.app, a->o.timing);
  add_json(c.app, a->json);
  c.seed = add_seed(c.app, a->o.seed);
  more(c);
  c.run = [a, &op, bench, after](const std::string& line) {
    check_writable(a->json);
    check_writable(a->shapes.svg);
    Options o = a->o;
    o.config.use_tune_cache = !any_knob(a->knobs);
    const Shapes run = choose_shapes(a->shapes, op.paper(), op.row_parallel, op.name);
    const std::vector<tb::Table> tables = run_shapes(
        o.world, std::string("bench ") + op.name, run.shapes, line, o.seed, a->json,
        [&](const Mnk& s) {
          o.m = s.m;
          o.n = s.n;
          o.k = s.k;
          return bench(o);
        },
        run.sweep, run.svg);
    after(o, run.shapes, tables);
    return 0;
  };
}

// `tune <op>` over one shape or the paper's three; `dry_run(search, world, shapes, dtype, scaling)`
// prints the candidates (of the operands' kernels, at their rate), `tune(TuneOptions, progress)`
// runs a search per shape.
template <class Options, class DryRun, class Tune>
void add_gemm_tune(Tool& tool, const GemmOp<Options>& op, const char* help, DryRun dry_run, Tune tune) {
  struct Args {
    TuneOptions<Options> o;
    ShapeChoice shapes;
    TuneSearch search;
    std::string json;
  };
  auto a = std::make_shared<Args>();
  a->o.op.timing = {2, 5};
  a->shapes.one = {a->o.op.m, a->o.op.n, a->o.op.k};
  Command& c = tool.add("tune", op.name, help);
  add_world(c.app, a->o.op.world);
  add_shape_options(c.app, a->shapes, op.paper(), op.m_help, op.n_help, op.k_help, op.name, false);
  a->search.add_to(c.app, "print the candidates and the model's predictions; no GPU needed");
  add_gemm_operands(c.app, op, a->o.op);
  add_timing(c.app, a->o.op.timing, Timed::kTune);
  add_json(c.app, a->json);
  c.seed = add_seed(c.app, a->o.op.seed);
  c.needs_gpu = [a] { return !a->search.dry_run; };
  c.run = [a, &op, dry_run, tune](const std::string& line) {
    const std::vector<Mnk> shapes = choose_shapes(a->shapes, op.paper(), op.row_parallel, op.name).shapes;
    const int world = a->o.op.world;
    if (a->search.dry_run) {
      if constexpr (requires { a->o.op.dtype; }) {
        return dry_run(a->search, world, shapes, a->o.op.dtype, a->o.op.scaling);
      } else {
        return dry_run(a->search, world, shapes, DType::kBf16, Fp8Scaling::kRow);
      }
    }
    check_writable(a->json);
    TuneOptions<Options> o = a->o;
    o.top = a->search.top;
    o.cache = a->search.cache;
    run_shapes(world, std::string("tune ") + op.name, shapes, line, o.op.seed, a->json, [&](const Mnk& s) {
      o.op.m = s.m;
      o.op.n = s.n;
      o.op.k = s.k;
      return tune(o, std::cout);
    });
    return 0;
  };
}

// `trace <op>` of one shape: "(m, n, k) = (...)" before the configuration.
template <class Options, class Trace>
void add_gemm_trace(Tool& tool, const GemmOp<Options>& op, const char* help, Trace trace) {
  add_trace_command(tool, GemmRunArgs<Options>(&op), op.name, help, "records per rank", trace, [](const Options& o) {
    return "(m, n, k) = (" + std::to_string(o.m) + ", " + std::to_string(o.n) + ", " + std::to_string(o.k) + ")";
  });
}

// ---- plan -----------------------------------------------------------------------------------------

// A plan's arguments: the model's problem and configuration, the cost model, the output files.
template <class Problem, class PlanConfig>
struct PlanArgs {
  Problem problem;
  PlanConfig config;
  CostOptions cost;
  PlanOutputs out;
};

// `plan <name>`: no GPU. Its options: --world and --nodes, `add_options(app, args)` (the op's), the
// cost model's and the output files; `plan(args, cost)` -- or `plan(args, cost, app)`, for a plan
// that asks which options the command line gave -- runs on a copy of the parsed arguments, once the
// files are known to be writable.
template <class Args, class AddOptions, class Plan>
void add_plan_command(Tool& tool, const char* name, const char* help, AddOptions add_options, Plan plan) {
  auto a = std::make_shared<Args>();
  Command& c = tool.add("plan", name, help);
  add_plan_world(c.app, a->problem.world, a->problem.nodes);
  add_options(c.app, *a);
  a->cost.add_to(c.app);
  a->out.add_to(c.app);
  c.needs_gpu = [] { return false; };
  c.run = [a, plan, app = c.app](const std::string&) {
    a->out.check_writable();
    if constexpr (std::is_invocable_v<Plan, const Args&, const sim::CostModel&, const CLI::App&>) {
      return plan(*a, a->cost.model(), *app);
    } else {
      return plan(*a, a->cost.model());
    }
  };
}

// An FP8 plan's compute tile: with --dtype e4m3, the tile of `kernel` (the FP8 configuration the op
// runs, by name) where --bm / --bn did not set it.
template <class Args>
void resolve_fp8_plan_tile(Args& a, const CLI::App& app, const std::string& kernel) {
  if (a.problem.dtype != DType::kE4m3) return;
  uint32_t bm = 0, bn = 0;
  detail::kernel_tile(kernel, "tilelink plan", &bm, &bn);
  if (app.get_option("--bm")->count() == 0) a.config.bm = bm;
  if (app.get_option("--bn")->count() == 0) a.config.bn = bn;
}

// --m, --n, --k, --bm and --bn of a GEMM's plan.
template <class Problem, class PlanConfig>
void add_plan_gemm_shape(CLI::App* app, Problem& p, PlanConfig& c, const char* m_help, const char* n_help,
                         const char* k_help) {
  app->add_option("--m", p.m, m_help)->capture_default_str();
  app->add_option("--n", p.n, n_help)->capture_default_str();
  app->add_option("--k", p.k, k_help)->capture_default_str();
  app->add_option("--bm", c.bm, "compute tile rows")->capture_default_str();
  app->add_option("--bn", c.bn, "compute tile columns")->capture_default_str();
}

}  // namespace tilelink::tool

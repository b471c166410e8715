// The shapes the tool takes by name: the models of DESIGN.md section 8, defined once, and the
// shape sets of the GEMM benchmarks (the paper's three shapes, the models' sweep).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tilelink::tool {

// A dense model's feed-forward layer: hidden size H and intermediate size I (over all ranks).
struct DenseModel {
  const char* name;
  uint32_t hidden, intermediate;
};

// A MoE model's layer: hidden size, each expert's intermediate size, experts and top-k.
struct MoeModel {
  const char* name;
  uint32_t hidden, intermediate, experts, topk;
};

const std::vector<DenseModel>& dense_models();
const std::vector<MoeModel>& moe_models();

// --model NAME of the MLP commands: the dense models' names. The caller makes the options it
// replaces (--hidden, --intermediate) exclude it.
CLI::Option* add_dense_model(CLI::App* app, std::string& name);
// The model's shape into hidden and intermediate; no change for "" (CLI11 has checked the name).
void apply_dense_model(const std::string& name, uint32_t& hidden, uint32_t& intermediate);

// --model NAME of the MoE commands.
CLI::Option* add_moe_model(CLI::App* app, std::string& name);
void apply_moe_model(const std::string& name, uint32_t& hidden, uint32_t& intermediate, uint32_t& experts,
                     uint32_t& topk);

// (m, n, k) of a GEMM op as its bench takes them.
struct Mnk {
  uint32_t m, n, k;
};

// A sweep's shape: the model it comes from and (m, n, k).
struct LabeledMnk {
  std::string label;
  Mnk shape;
};

// The paper's three shapes of AG+GEMM (the column-parallel up projection, M x N x K) and of
// GEMM+RS (the row-parallel down one, M x K x N).
const std::vector<Mnk>& ag_gemm_paper_shapes();
const std::vector<Mnk>& gemm_rs_paper_shapes();

// Every dense model's layer at M = 8192 tokens: AG+GEMM computes M x I x H, GEMM+RS (row
// parallel) M x H x I.
std::vector<LabeledMnk> model_sweep(bool row_parallel);

// The shape options of a GEMM op's bench and tune: --m, --n, --k (`one`) and --shapes paper;
// with `sweep`, --sweep and --svg too.
struct ShapeChoice {
  Mnk one;
  std::string shapes;  // "paper": the paper's three instead of --m/--n/--k
  bool sweep = false;  // the models' sweep
  std::string svg;     // the sweep's chart
};
void add_shape_options(CLI::App* app, ShapeChoice& choice, const std::vector<Mnk>& paper, const char* m_help,
                       const char* n_help, const char* k_help, const std::string& op, bool sweep);

// What a dense op's command runs: the models' sweep (`sweep`: the labels; `svg`: its chart, by
// default tilelink_<op>_sweep.svg), the paper's three shapes, or the one given.
struct Shapes {
  std::vector<Mnk> shapes;
  std::vector<LabeledMnk> sweep;
  std::string svg;
};
Shapes choose_shapes(const ShapeChoice& choice, const std::vector<Mnk>& paper, bool row_parallel,
                     const std::string& op);

}  // namespace tilelink::tool

#include "tools/models.hpp"

namespace tilelink::tool {
namespace {

template <class Model>
std::vector<std::string> names_of(const std::vector<Model>& models) {
  std::vector<std::string> names;
  for (const Model& m : models) names.push_back(m.name);
  return names;
}

std::string listed(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

std::string shape_list(const std::vector<Mnk>& shapes) {
  std::string s;
  for (const Mnk& x : shapes) {
    s += (s.empty() ? "(" : ", (") + std::to_string(x.m) + ", " + std::to_string(x.n) + ", " + std::to_string(x.k) +
         ")";
  }
  return s;
}

}  // namespace

// DESIGN.md section 8: the dense models' layers (N = intermediate, K = hidden per layer) and the
// MoE models' (hidden, each expert's intermediate, experts, top-k).
const std::vector<DenseModel>& dense_models() {
  static const std::vector<DenseModel> models = {
      {"llama-7b", 4096, 11008},   {"llama3-8b", 4096, 14336}, {"llama3-70b", 8192, 28672},
      {"llama3-405b", 16384, 53248}, {"qwen2-72b", 8192, 29568}, {"gpt3-175b", 12288, 49152}};
  return models;
}

const std::vector<MoeModel>& moe_models() {
  static const std::vector<MoeModel> models = {{"mixtral-8x7b", 4096, 14336, 8, 2},
                                               {"mixtral-8x22b", 6144, 16384, 8, 2},
                                               {"qwen1.5-moe", 2048, 1408, 60, 4},
                                               {"deepseek-moe", 2048, 1408, 64, 6}};
  return models;
}

CLI::Option* add_dense_model(CLI::App* app, std::string& name) {
  const std::vector<std::string> names = names_of(dense_models());
  return app->add_option("--model", name, "take hidden and intermediate from a model: " + listed(names))
      ->check(CLI::IsMember(names));
}

void apply_dense_model(const std::string& name, uint32_t& hidden, uint32_t& intermediate) {
  for (const DenseModel& model : dense_models()) {
    if (name == model.name) {
      hidden = model.hidden;
      intermediate = model.intermediate;
    }
  }
}

CLI::Option* add_moe_model(CLI::App* app, std::string& name) {
  const std::vector<std::string> names = names_of(moe_models());
  return app->add_option("--model", name, "take the shape from a model: " + listed(names))->check(CLI::IsMember(names));
}

void apply_moe_model(const std::string& name, uint32_t& hidden, uint32_t& intermediate, uint32_t& experts,
                     uint32_t& topk) {
  for (const MoeModel& model : moe_models()) {
    if (name == model.name) {
      hidden = model.hidden;
      intermediate = model.intermediate;
      experts = model.experts;
      topk = model.topk;
    }
  }
}

const std::vector<Mnk>& ag_gemm_paper_shapes() {
  static const std::vector<Mnk> shapes = {{8192, 28672, 8192}, {8192, 14336, 4096}, {8192, 49152, 12288}};
  return shapes;
}

const std::vector<Mnk>& gemm_rs_paper_shapes() {
  static const std::vector<Mnk> shapes = {{8192, 8192, 28672}, {8192, 4096, 14336}, {8192, 12288, 49152}};
  return shapes;
}

std::vector<LabeledMnk> model_sweep(bool row_parallel) {
  std::vector<LabeledMnk> out;
  for (const DenseModel& m : dense_models()) {
    out.push_back({m.name, row_parallel ? Mnk{8192, m.hidden, m.intermediate} : Mnk{8192, m.intermediate, m.hidden}});
  }
  return out;
}

void add_shape_options(CLI::App* app, ShapeChoice& choice, const std::vector<Mnk>& paper, const char* m_help,
                       const char* n_help, const char* k_help, const std::string& op, bool sweep) {
  app->add_option("--m", choice.one.m, m_help)->capture_default_str()->check(CLI::PositiveNumber);
  app->add_option("--n", choice.one.n, n_help)->capture_default_str()->check(CLI::PositiveNumber);
  app->add_option("--k", choice.one.k, k_help)->capture_default_str()->check(CLI::PositiveNumber);
  CLI::Option* shapes = app->add_option("--shapes", choice.shapes, "paper: " + shape_list(paper) +
                                                                        " instead of --m/--n/--k")
                            ->check(CLI::IsMember({"paper"}));
  if (!sweep) return;
  app->add_flag("--sweep", choice.sweep,
                "the model shapes of DESIGN.md section 8 (M = 8192), with a progress bar and an SVG chart of the "
                "speedups")
      ->excludes(shapes);
  app->add_option("--svg", choice.svg, "sweep: the chart's file (default tilelink_" + op + "_sweep.svg)");
}

Shapes choose_shapes(const ShapeChoice& choice, const std::vector<Mnk>& paper, bool row_parallel,
                     const std::string& op) {
  Shapes c;
  if (choice.sweep) {
    c.sweep = model_sweep(row_parallel);
    for (const LabeledMnk& s : c.sweep) c.shapes.push_back(s.shape);
    c.svg = choice.svg.empty() ? "tilelink_" + op + "_sweep.svg" : choice.svg;
  } else {
    c.shapes = choice.shapes == "paper" ? paper : std::vector<Mnk>{choice.one};
  }
  return c;
}

}  // namespace tilelink::tool

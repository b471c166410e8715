#include "bench/report.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <ostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tilelink/core/error.hpp"

namespace tilelink::bench {
namespace {

using Json = nlohmann::ordered_json;

std::string to_text(const Value& v, int precision) {
  struct Visitor {
    int precision;
    std::string operator()(std::monostate) const { return "-"; }
    std::string operator()(const std::string& s) const { return s; }
    std::string operator()(int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const {
      if (!std::isfinite(d)) return "-";
      std::ostringstream os;
      os << std::fixed << std::setprecision(precision) << d;
      return os.str();
    }
  };
  return std::visit(Visitor{precision}, v);
}

Json to_json(const Value& v) {
  struct Visitor {
    Json operator()(std::monostate) const { return nullptr; }
    Json operator()(const std::string& s) const { return s; }
    Json operator()(int64_t i) const { return i; }
    Json operator()(double d) const { return std::isfinite(d) ? Json(d) : Json(nullptr); }
  };
  return std::visit(Visitor{}, v);
}

Json to_json(const Fields& fields) {
  Json j = Json::object();
  for (const auto& [key, value] : fields) j[key] = to_json(value);
  return j;
}

// Display width in terminal columns: UTF-8 continuation bytes take no column.
size_t display_width(const std::string& s) {
  return static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }));
}

std::string pad(const std::string& s, size_t width, bool right) {
  const size_t w = display_width(s);
  const std::string fill(width > w ? width - w : 0, ' ');
  return right ? fill + s : s + fill;
}

}  // namespace

void Table::add_row(std::vector<Value> row) {
  if (row.size() != columns.size()) {
    throw Error("table '" + name + "': row has " + std::to_string(row.size()) + " values, expected " +
                std::to_string(columns.size()));
  }
  rows.push_back(std::move(row));
}

void print_table(std::ostream& os, const Table& table) {
  os << "== " << table.title << " ==\n";
  if (!table.params.empty()) {
    std::string line;
    for (const auto& [key, value] : table.params) {
      line += (line.empty() ? "" : "  ") + key + "=" + to_text(value, 3);
    }
    os << line << "\n";
  }
  const size_t n = table.columns.size();
  std::vector<std::vector<std::string>> cells;
  std::vector<size_t> width(n);
  std::vector<bool> numeric(n, true);
  for (size_t c = 0; c < n; ++c) width[c] = display_width(table.columns[c].header);
  for (const auto& row : table.rows) {
    std::vector<std::string> text(n);
    for (size_t c = 0; c < n; ++c) {
      text[c] = to_text(row[c], table.columns[c].precision);
      width[c] = std::max(width[c], display_width(text[c]));
      if (std::holds_alternative<std::string>(row[c])) numeric[c] = false;
    }
    cells.push_back(std::move(text));
  }
  auto print_line = [&](const std::vector<std::string>& text) {
    std::string line;
    for (size_t c = 0; c < n; ++c) line += (c ? "  " : "") + pad(text[c], width[c], numeric[c]);
    os << line << "\n";
  };
  std::vector<std::string> headers(n);
  for (size_t c = 0; c < n; ++c) headers[c] = table.columns[c].header;
  print_line(headers);
  std::vector<std::string> rules(n);
  for (size_t c = 0; c < n; ++c) rules[c] = std::string(width[c], '-');
  print_line(rules);
  for (const auto& text : cells) print_line(text);
  for (const auto& note : table.notes) os << "note: " << note << "\n";
  os << "\n";
}

void write_json(const std::string& path, const Fields& meta, const std::vector<Table>& tables) {
  Json doc = Json::object();
  doc["meta"] = to_json(meta);
  Json list = Json::array();
  for (const Table& t : tables) {
    Json jt = Json::object();
    jt["name"] = t.name;
    jt["title"] = t.title;
    jt["params"] = to_json(t.params);
    Json columns = Json::array();
    for (const Column& c : t.columns) columns.push_back({{"key", c.key}, {"header", c.header}});
    jt["columns"] = std::move(columns);
    Json rows = Json::array();
    for (const auto& row : t.rows) {
      Json jr = Json::object();
      for (size_t c = 0; c < t.columns.size(); ++c) jr[t.columns[c].key] = to_json(row[c]);
      rows.push_back(std::move(jr));
    }
    jt["rows"] = std::move(rows);
    jt["notes"] = t.notes;
    list.push_back(std::move(jt));
  }
  doc["tables"] = std::move(list);

  std::ofstream out(path);
  if (!out) throw Error("cannot open '" + path + "' for writing the JSON results");
  out << doc.dump(2) << "\n";
  out.close();
  if (!out) throw Error("failed writing the JSON results to '" + path + "'");
}

}  // namespace tilelink::bench

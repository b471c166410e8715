// Benchmark results as tables: printed for people, written as JSON for the log and for tools.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace tilelink::bench {

// One cell: nothing ("-" / null), text, an integer or a number.
using Value = std::variant<std::monostate, std::string, int64_t, double>;

struct Column {
  std::string key;     // JSON key: snake_case with the unit, e.g. "time_us"
  std::string header;  // printed header, e.g. "time µs"
  int precision = 2;   // digits after the point for doubles
};

using Fields = std::vector<std::pair<std::string, Value>>;

struct Table {
  std::string name;   // machine name, e.g. "signal_latency"
  std::string title;  // one line for people
  Fields params;      // configuration the rows were measured with
  std::vector<Column> columns;
  std::vector<std::vector<Value>> rows;
  std::vector<std::string> notes;

  // Throws Error unless the row has one value per column.
  void add_row(std::vector<Value> row);
};

void print_table(std::ostream& os, const Table& table);

// Writes {"meta": {...}, "tables": [{name, title, params, columns, rows: [{key: value}], notes}]}
// to `path`. Throws Error if the file cannot be written.
void write_json(const std::string& path, const Fields& meta, const std::vector<Table>& tables);

}  // namespace tilelink::bench

// The tape, readable: an aligned table of the live entries and a Graphviz graph.
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <ostream>
#include <sstream>
#include <unordered_map>

#include "../autograd/tape.h"
#include "../tensor/atomic_file.h"
#include "internal/frames.h"

namespace reel::debug {
namespace {

std::string meta_str(const TensorMeta& m) {
  return m.defined ? fmt::format("{} {}", m.shape.str(), dtype_name(m.dtype)) : std::string("-");
}

std::string metas_str(const std::vector<TensorMeta>& ms) {
  std::string s;
  for (size_t i = 0; i < ms.size(); ++i) s += (i ? ", " : "") + meta_str(ms[i]);
  return s;
}

// DOT string literal contents: quotes and backslashes escaped, newlines as \n.
std::string dot_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') { out += "\\n"; continue; }
    out += c;
  }
  return out;
}

// "train.cpp:12": the graph is read at a glance, so the file without its directories.
std::string short_site(const Site& site) {
  if (!site.known()) return "unknown site";
  std::string_view f(site.file);
  size_t slash = f.find_last_of('/');
  if (slash != std::string_view::npos) f.remove_prefix(slash + 1);
  return fmt::format("{}:{}", f, site.line);
}

}  // namespace

void print_tape(std::ostream& os) {
  std::vector<Ref<Node>> entries = autograd::tape_entries();
  struct Row {
    std::string idx, seq, op, in, out, dev, args, module, site;
  };
  std::vector<Row> rows;
  rows.push_back({"#", "seq", "op", "inputs", "outputs", "device", "args", "module", "site"});
  for (size_t i = 0; i < entries.size(); ++i) {
    const Node& n = *entries[i];
    std::string dev = !n.outputs.empty() ? n.outputs[0].device.str() : !n.inputs.empty() ? n.inputs[0].device.str() : "";
    std::string args = n.args_str();
    rows.push_back({std::to_string(i), std::to_string(n.seq), n.label(), metas_str(n.inputs), metas_str(n.outputs), dev,
                    args.empty() ? "-" : args, n.module ? n.module->str() : "-", n.site.str()});
  }
  size_t w[8] = {};
  for (const Row& r : rows) {
    const std::string* cols[8] = {&r.idx, &r.seq, &r.op, &r.in, &r.out, &r.dev, &r.args, &r.module};
    for (int c = 0; c < 8; ++c) w[c] = std::max(w[c], cols[c]->size());
  }
  for (const Row& r : rows)
    os << fmt::format("{:<{}}  {:<{}}  {:<{}}  {:<{}}  {:<{}}  {:<{}}  {:<{}}  {:<{}}  {}\n", r.idx, w[0], r.seq, w[1],
                      r.op, w[2], r.in, w[3], r.out, w[4], r.dev, w[5], r.args, w[6], r.module, w[7], r.site);
}

std::string tape_str() {
  std::ostringstream os;
  print_tape(os);
  return os.str();
}

std::string tape_dot() {
  std::vector<Ref<Node>> entries = autograd::tape_entries();
  std::unordered_map<const Node*, std::string> ids;
  for (size_t i = 0; i < entries.size(); ++i) ids[entries[i].get()] = fmt::format("op{}", i);

  std::string nodes, edges;
  // entry boxes by module, drawn inside nested clusters after the loop
  std::map<const ModulePath*, std::string> in_module;
  std::unordered_map<const TensorImpl*, std::string> leaves;
  size_t n_outside = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Node& n = *entries[i];
    std::string id = ids[&n];
    std::string outs;
    for (size_t k = 0; k < n.outputs.size(); ++k) outs += (k ? ", " : "") + meta_str(n.outputs[k]);
    (n.module ? in_module[n.module] : nodes) +=
        fmt::format("  {} [shape=box, style=\"rounded,filled\", fillcolor=\"#fff2cc\", label=\"#{} {}\\n{}\\n-> {}\"];\n",
                    id, i, dot_escape(n.label()), dot_escape(short_site(n.site)), dot_escape(outs));
    for (size_t k = 0; k < n.edges.size(); ++k) {
      const Edge& e = n.edges[k];
      std::string from;
      if (e.node) {
        auto it = ids.find(e.node.get());
        if (it == ids.end()) {  // an entry of another thread's tape, or one made before a reset
          from = fmt::format("outside{}", n_outside++);
          ids[e.node.get()] = from;
          nodes += fmt::format("  {} [shape=box, style=dashed, label=\"{}\\n(not on this tape)\"];\n", from,
                               dot_escape(e.node->label()));
        } else {
          from = it->second;
        }
      } else if (e.leaf) {
        auto it = leaves.find(e.leaf.get());
        if (it == leaves.end()) {
          from = fmt::format("leaf{}", leaves.size());
          leaves[e.leaf.get()] = from;
          const TensorImpl& t = *e.leaf;
          nodes += fmt::format("  {} [shape=ellipse, style=filled, fillcolor=\"#cfe2f3\", label=\"leaf\\n{} {}\"];\n", from,
                               t.shape.str(), dtype_name(t.dtype));
        } else {
          from = it->second;
        }
      } else if (k < n.inputs.size() && n.inputs[k].defined) {  // an input without grad
        from = fmt::format("{}_const{}", id, k);
        nodes += fmt::format("  {} [shape=ellipse, style=dashed, fontcolor=gray40, label=\"const\\n{}\"];\n", from,
                             meta_str(n.inputs[k]));
      } else {
        continue;
      }
      std::string label = k < n.inputs.size() ? n.inputs[k].shape.str() : "";
      edges += fmt::format("  {} -> {} [label=\"{}\"];\n", from, id, label);
    }
  }
  // one cluster per module, inside its parent's: every ancestor of a module with entries
  std::map<const ModulePath*, std::vector<const ModulePath*>> children;
  std::vector<const ModulePath*> roots;
  std::set<const ModulePath*> seen;
  for (const auto& [m, text] : in_module)
    for (const ModulePath* p = m; p && seen.insert(p).second; p = p->parent)
      (p->parent ? children[p->parent] : roots).push_back(p);
  int n_cluster = 0;
  std::function<void(const ModulePath*, int)> cluster = [&](const ModulePath* m, int indent) {
    std::string pad(size_t(indent), ' ');
    nodes += fmt::format("{}subgraph cluster_{} {{\n{}  label=\"{}\"; style=rounded; color=gray50; fontname=\"monospace\";\n",
                         pad, n_cluster++, pad, dot_escape(m->path.empty() ? m->type : m->path + " (" + m->type + ")"));
    auto it = in_module.find(m);
    if (it != in_module.end()) {
      std::istringstream lines(it->second);
      for (std::string line; std::getline(lines, line);) nodes += pad + line + "\n";
    }
    for (const ModulePath* c : children[m]) cluster(c, indent + 2);
    nodes += pad + "}\n";
  };
  for (const ModulePath* r : roots) cluster(r, 2);
  return "digraph tape {\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n"
         "  edge [fontname=\"monospace\", fontsize=9];\n" +
         nodes + edges + "}\n";
}

void write_dot(const std::string& path) { write_file_atomically(path, tape_dot(), "write_dot"); }

}  // namespace reel::debug

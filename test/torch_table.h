// Tables of inputs and PyTorch's outputs written by the generators in test/reference/
// (ops15.py, fused17.py, sdpa_half.py). Format, one tensor a line:
//   <case> <name> <dtype> <rank> <dims...> <values...>   ("=name": PyTorch's output)
#pragma once
#include <catch2/catch.hpp>
#include <reel/reel.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace reel::test {

// The flat format (semantics.py, inplace.py): "<name> <values...>" a line, nan/inf spelled
// so; name -> values.
inline std::map<std::string, std::vector<double>> load_flat_table(const std::string& file) {
  std::map<std::string, std::vector<double>> out;
  std::string path = std::string(REEL_SOURCE_DIR) + "/test/reference/" + file;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    std::string name, word;
    words >> name;
    std::vector<double>& values = out[name];
    while (words >> word) values.push_back(std::strtod(word.c_str(), nullptr));  // reads nan, inf, -inf
  }
  return out;
}

// case -> name -> tensor
using Table = std::map<std::string, std::map<std::string, Tensor>>;

inline Table load_torch_table(const std::string& file) {
  Table t;
  std::ifstream f(std::string(REEL_SOURCE_DIR) + "/test/reference/" + file);
  REQUIRE(f.good());
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    std::string c, name, dt;
    int rank;
    in >> c >> name >> dt >> rank;
    Dims shape;
    for (int i = 0; i < rank; ++i) {
      int64_t s;
      in >> s;
      shape.push_back(s);
    }
    std::vector<double> v;
    std::string tok;
    while (in >> tok) v.push_back(std::strtod(tok.c_str(), nullptr));
    DType d = dt == "f32"    ? DType::f32
              : dt == "f64"  ? DType::f64
              : dt == "bf16" ? DType::bf16
              : dt == "f16"  ? DType::f16
              : dt == "i64"  ? DType::i64
                             : DType::boolean;
    // bools read through u8; halves are written as the f64 values they hold exactly (sdpa_half.py)
    const DType read = d == DType::boolean ? DType::u8 : is_low_precision(d) ? DType::f64 : d;
    Tensor x = from_vector<double>(v, Dims{int64_t(v.size())}, {.dtype = read});
    if (read != d) x = x.to(d);
    t[c][name] = x.reshape(shape);
  }
  return t;
}

struct Case {
  const std::map<std::string, Tensor>& m;
  std::string name;
  Tensor in(const std::string& k) const {
    auto it = m.find(k);
    INFO(name << ": " << k);
    REQUIRE(it != m.end());
    return it->second;
  }
  Tensor out(const std::string& k) const { return in("=" + k); }
};
// One table per file for the whole test program, read on first use: the files that share a
// generated table (libtorch_surface.txt) read it once.
// Never destroyed: its tensors would be freed at exit after the CPU backend they came from
// (a static of libreel made after this map, hence destroyed before it; UBSan's vptr check).
inline const Table& cached_torch_table(const std::string& file) {
  static std::map<std::string, Table>& tables = *new std::map<std::string, Table>();
  auto it = tables.find(file);
  if (it == tables.end()) it = tables.emplace(file, load_torch_table(file)).first;
  return it->second;
}

inline Case find_case(const Table& t, const std::string& name) {
  auto it = t.find(name);
  INFO(name);
  REQUIRE(it != t.end());
  return {it->second, name};
}

// shapes equal, dtypes equal, values within tol (NaN matches NaN, infinities match exactly)
inline std::string differ(const Tensor& got, const Tensor& want, double tol = 1e-5) {
  if (got.shape() != want.shape()) return "shape " + got.shape().str() + " vs " + want.shape().str();
  if (got.dtype() != want.dtype())
    return std::string("dtype ") + dtype_name(got.dtype()) + " vs " + dtype_name(want.dtype());
  std::vector<double> a = got.to(DType::f64).to_vector<double>(), b = want.to(DType::f64).to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) {
    bool ok = std::isnan(b[i]) ? std::isnan(a[i])
              : std::isinf(b[i]) ? a[i] == b[i]
                                 : std::abs(a[i] - b[i]) <= tol * (1 + std::abs(b[i]));
    if (!ok) return "element " + std::to_string(i) + ": " + std::to_string(a[i]) + " vs " + std::to_string(b[i]);
  }
  return "";
}
#define CHECK_MATCHES(got, c, key, ...)                                \
  do {                                                                 \
    INFO((c).name << " " << key);                                      \
    CHECK(::reel::test::differ(got, (c).out(key), ##__VA_ARGS__) == ""); \
  } while (0)

}  // namespace reel::test

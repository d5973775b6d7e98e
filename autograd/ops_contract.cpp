// Products: outer, addmm, baddbmm and einsum. All lower to matmul/bmm, permute,
// reshape, expand and sum, so their gradients are those ops' rules.
//
// einsum, step by step: each operand's subscripts become labels (letters, and one
// label per dim that "..." stands for, aligned from the right so they broadcast); a
// label that appears in one operand only and not in the output is summed out at once;
// the operands are then contracted left to right, each pair as one bmm over
// [shared-and-kept, left-only, contracted] x [shared-and-kept, contracted, right-only];
// the result is summed over what is left and permuted into the output's order.
#include <algorithm>

#include "op_support.h"
#include "ops.h"

namespace reel {
namespace {

// labels 0-25 'A'-'Z', 26-51 'a'-'z' (so that an implicit output sorts as PyTorch's: uppercase
// first), then the dims of "..."
constexpr int kEllipsisLabel = 52;

// A tensor whose dims are named by labels, one label per dim.
struct Labelled {
  Tensor t;
  std::vector<int> labels;
};

int label_of(char c) { return c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? 26 + (c - 'a') : -1; }

bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Sums out the labels of l that `keep` says to drop.
Labelled sum_out(Labelled l, const std::vector<int>& keep) {
  Dims drop;
  std::vector<int> rest;
  for (size_t i = 0; i < l.labels.size(); ++i) {
    if (contains(keep, l.labels[i])) rest.push_back(l.labels[i]);
    else drop.push_back(int64_t(i));
  }
  if (drop.empty()) return l;
  return {sum(l.t, drop), rest};
}

// l permuted so that its labels come in `order` (every label of l appears there once)
Tensor arranged(const Labelled& l, const std::vector<int>& order) {
  Dims perm;
  for (int lab : order) perm.push_back(std::find(l.labels.begin(), l.labels.end(), lab) - l.labels.begin());
  return l.t.permute(perm);
}

int64_t size_of(const Labelled& l, int lab) {
  auto it = std::find(l.labels.begin(), l.labels.end(), lab);
  return it == l.labels.end() ? 1 : l.t.size(it - l.labels.begin());
}

// a and b contracted over their shared labels that are not in keep, as one bmm
Labelled contract(const OpScope& op, Labelled a, Labelled b, const std::vector<int>& keep) {
  std::vector<int> batch, left, contracted, right;
  for (int lab : a.labels) {
    if (contains(b.labels, lab)) (contains(keep, lab) ? batch : contracted).push_back(lab);
    else left.push_back(lab);
  }
  for (int lab : b.labels)
    if (!contains(a.labels, lab)) right.push_back(lab);
  auto sizes = [&](const std::vector<int>& labs, int64_t& product) {
    Dims s;
    product = 1;
    for (int lab : labs) {
      int64_t sa = size_of(a, lab), sb = size_of(b, lab);
      if (sa != sb && sa != 1 && sb != 1)
        fail(op.op, fmt::format("a subscript stands for sizes {} and {} in two operands", sa, sb), op.site);
      s.push_back(std::max(sa, sb));
      product *= s.back();
    }
    return s;
  };
  int64_t B, M, K, N;
  Dims bs = sizes(batch, B), ls = sizes(left, M), ks = sizes(contracted, K), rs = sizes(right, N);
  auto concat = [](std::initializer_list<const std::vector<int>*> parts) {
    std::vector<int> v;
    for (auto* p : parts) v.insert(v.end(), p->begin(), p->end());
    return v;
  };
  auto dims_of = [](std::initializer_list<const Dims*> parts) {
    Dims d;
    for (auto* p : parts)
      for (int64_t s : *p) d.push_back(s);
    return d;
  };
  Tensor ta = arranged(a, concat({&batch, &left, &contracted})).expand(dims_of({&bs, &ls, &ks}));
  Tensor tb = arranged(b, concat({&batch, &contracted, &right})).expand(dims_of({&bs, &ks, &rs}));
  Tensor y = bmm(ta.reshape({B, M, K}), tb.reshape({B, K, N}));
  return {y.reshape(dims_of({&bs, &ls, &rs})), concat({&batch, &left, &right})};
}

}  // namespace

// y = a b^T as an outer product: [n] x [m] -> [n, m]
Tensor outer(const Tensor& a, const Tensor& b, Site site) {
  OpScope op("outer", site);
  check_defined(op, a, "the first vector");
  check_defined(op, b, "the second vector");
  check_dim(op, a, 1, "the first vector");
  check_dim(op, b, 1, "the second vector");
  return mul(a.unsqueeze(1), b.unsqueeze(0));
}

namespace {
// y = beta input + alpha product (input ignored when beta = 0, as PyTorch: its NaNs do not spread)
Tensor scaled_sum(const OpScope& op, const Tensor& input, Tensor product, double beta, double alpha) {
  if (broadcast_shapes(op.op, input.shape(), product.shape(), op.site) != product.shape())
    fail(op.op, fmt::format("the input {} does not broadcast to the product's shape {}", input.shape().str(),
                            product.shape().str()), op.site);
  if (alpha != 1) product = mul(product, alpha);
  if (beta == 0) return product;
  return add(product, beta == 1 ? input : mul(input, beta));
}
}  // namespace

Tensor addmm(const Tensor& input, const Tensor& m1, const Tensor& m2, double beta, double alpha, Site site) {
  OpScope op("addmm", site);
  check_defined(op, input, "the input");
  check_defined(op, m1, "the first matrix");
  check_defined(op, m2, "the second matrix");
  check_dim(op, m1, 2, "the first matrix [n, m]");
  check_dim(op, m2, 2, "the second matrix [m, p]");
  check_same_device(op, m1, m2);
  if (m1.size(1) != m2.size(0))
    fail(op.op, fmt::format("the first matrix {} and the second {} do not chain: [n, m] @ [m, p] needs {} = {}",
                            m1.shape().str(), m2.shape().str(), m1.size(1), m2.size(0)), op.site);
  return scaled_sum(op, input, matmul(m1, m2), beta, alpha);
}

Tensor baddbmm(const Tensor& input, const Tensor& b1, const Tensor& b2, double beta, double alpha, Site site) {
  OpScope op("baddbmm", site);
  check_defined(op, input, "the input");
  check_defined(op, b1, "the first batch");
  check_defined(op, b2, "the second batch");
  check_dim(op, b1, 3, "the first batch [B, n, m]");
  check_dim(op, b2, 3, "the second batch [B, m, p]");
  if (b1.size(0) != b2.size(0) || b1.size(2) != b2.size(1))
    fail(op.op, fmt::format("the batches {} and {} do not chain: [B, n, m] @ [B, m, p]", b1.shape().str(),
                            b2.shape().str()), op.site);
  return scaled_sum(op, input, bmm(b1, b2), beta, alpha);
}

Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands, Site site) {
  OpScope op("einsum", site);
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq.push_back(c);
  size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != operands.size())
    fail(op.op, fmt::format("the equation \"{}\" has {} operand terms, {} tensors came", equation, terms.size(),
                            operands.size()), op.site);
  for (size_t i = 0; i < operands.size(); ++i) check_defined(op, operands[i], "an operand");
  // letters of one term, and how many dims its "..." covers
  auto parse = [&](const std::string& term, int ndim, std::vector<int>& labels, int& ellipsis_at) {
    ellipsis_at = -1;
    int letters = 0;
    for (size_t i = 0; i < term.size(); ++i) {
      if (term.compare(i, 3, "...") == 0) {
        if (ellipsis_at >= 0) fail(op.op, fmt::format("\"{}\" has \"...\" twice in one term", equation), op.site);
        ellipsis_at = int(labels.size());
        labels.push_back(-1);  // placeholder
        i += 2;
      } else if (label_of(term[i]) >= 0) {
        labels.push_back(label_of(term[i]));
        ++letters;
      } else {
        fail(op.op, fmt::format("unexpected character '{}' in the equation \"{}\" (subscripts are letters, \"...\", "
                                "',' and \"->\")", term[i], equation), op.site);
      }
    }
    if (ndim >= 0 && (ellipsis_at >= 0 ? letters > ndim : letters != ndim))
      fail(op.op, fmt::format("the term \"{}\" of \"{}\" names {} dims, its operand has {}", term, equation, letters,
                              ndim), op.site);
    return ndim - letters;  // dims under "..."
  };
  // the labels of each operand, "..." expanded to its dims (aligned from the right)
  std::vector<Labelled> ls;
  std::vector<int> count(kEllipsisLabel + kMaxDims, 0);
  int max_ellipsis = 0;
  std::vector<std::vector<int>> raw(terms.size());
  std::vector<int> at(terms.size()), covered(terms.size());
  for (size_t i = 0; i < terms.size(); ++i) {
    covered[i] = parse(terms[i], operands[i].dim(), raw[i], at[i]);
    if (at[i] < 0) covered[i] = 0;
    max_ellipsis = std::max(max_ellipsis, covered[i]);
  }
  for (size_t i = 0; i < terms.size(); ++i) {
    std::vector<int> labels;
    for (int lab : raw[i]) {
      if (lab >= 0) {
        if (contains(labels, lab))
          fail(op.op, fmt::format("the term \"{}\" of \"{}\" repeats a subscript (a diagonal), which einsum here "
                                  "does not take", terms[i], equation), op.site);
        labels.push_back(lab);
      } else {
        for (int j = 0; j < covered[i]; ++j) labels.push_back(kEllipsisLabel + max_ellipsis - covered[i] + j);
      }
    }
    for (int lab : labels) ++count[size_t(lab)];
    ls.push_back({operands[i], labels});
  }
  // the output's labels
  std::vector<int> out;
  if (arrow != std::string::npos) {
    std::vector<int> raw_out;
    int out_at = -1;
    parse(eq.substr(arrow + 2), -1, raw_out, out_at);
    for (int lab : raw_out) {
      if (lab >= 0) {
        if (count[size_t(lab)] == 0)
          fail(op.op, fmt::format("the output of \"{}\" names a subscript no operand has", equation), op.site);
        if (contains(out, lab)) fail(op.op, fmt::format("the output of \"{}\" repeats a subscript", equation), op.site);
        out.push_back(lab);
      } else {
        for (int j = 0; j < max_ellipsis; ++j) out.push_back(kEllipsisLabel + j);
      }
    }
    if (out_at < 0 && max_ellipsis > 0)
      fail(op.op, fmt::format("the output of \"{}\" drops the dims of \"...\"; name them with \"...\" in the output",
                              equation), op.site);
  } else {
    for (int j = 0; j < max_ellipsis; ++j) out.push_back(kEllipsisLabel + j);
    for (int lab = 0; lab < kEllipsisLabel; ++lab)
      if (count[size_t(lab)] == 1) out.push_back(lab);
  }
  // the labels still needed after operand i: the output's and those of later operands
  auto needed_after = [&](size_t i) {
    std::vector<int> keep = out;
    for (size_t j = i + 1; j < ls.size(); ++j) keep.insert(keep.end(), ls[j].labels.begin(), ls[j].labels.end());
    return keep;
  };
  auto needed_by_others = [&](size_t i) {
    std::vector<int> keep = needed_after(i);
    for (size_t j = 0; j < i; ++j) keep.insert(keep.end(), ls[j].labels.begin(), ls[j].labels.end());
    return keep;
  };
  for (size_t i = 0; i < ls.size(); ++i) ls[i] = sum_out(ls[i], needed_by_others(i));
  Labelled cur = ls[0];
  for (size_t i = 1; i < ls.size(); ++i) {
    std::vector<int> keep = needed_after(i);
    std::vector<int> keep_cur = keep;
    keep_cur.insert(keep_cur.end(), ls[i].labels.begin(), ls[i].labels.end());
    cur = contract(op, sum_out(cur, keep_cur), ls[i], keep);
  }
  cur = sum_out(cur, out);
  // a label of the output that broadcast away entirely cannot happen: every output label is in some operand
  return arranged(cur, out);
}

}  // namespace reel

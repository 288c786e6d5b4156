// CudnnSdpa (cudnn_sdpa.h): causal attention through cuDNN's fused flash attention, written
// against the C backend API (cudnnBackendCreateDescriptor / SetAttribute / Finalize / Execute).
//
// The graphs are cuDNN's documented patterns (cuDNN developer guide, Graph API, "Specialized
// Runtime Fusion Engines": "Fused Flash Attention fprop" and "Fused Flash Attention bprop"), in the
// node shape cudnn_frontend's SDPA nodes lower to (its sdpa forward / backward nodes and its
// composite softmax, read for the shape only): the runtime-fusion engine matches that shape, so a
// graph that strays from it gets no engine.
//
// Shapes (4-D, [b, h, s, d] in cuDNN's dims; qkv is baton's [B, T, 3C], head h of Q at column
// h*HS, of K at C + h*HS, of V at 2C + h*HS):
//   Q  [B, NH, T, HS]  strides [3CT, HS, 3C, 1]    (qkv)
//   KT [B, NH, HS, T]  strides [3CT, HS, 1, 3C]    (qkv + C: K transposed, a view)
//   V  [B, NH, T, HS]  strides [3CT, HS, 3C, 1]    (qkv + 2C)
//   O  [B, NH, T, HS]  strides [CT, HS, C, 1]      (out [B, T, C])
//   Stats [B, NH, T, 1] strides [NH T, T, 1, 1]    fp32 (baton's lse[B, NH, T])
// The documented limits these meet: bf16 Q/K/V/O, the head dim a multiple of 8 and <= 128
// (Ampere; Hopper allows 256 forward, the backward is documented to 128), stride 1 along the
// head dim of Q, K, V, O, dO, dQ, dK, dV; Stats fp32, row major.
//
// Forward (scale = 1/sqrt(HS), by value; -FLT_MAX by value as the mask's fill, as the frontend):
//   S = matmul(Q, KT) (fp32) ; S = S * scale ; r = GEN_INDEX(S, axis 2) ; c = GEN_INDEX(S, axis 3)
//   keep = CMP_GE(r, c) ; S = BINARY_SELECT(S, -FLT_MAX, keep)                  (causal mask)
//   m = REDUCE_MAX(S) ; E = EXP(S - m) ; z = REDUCE_ADD(E) ; Stats = m + LOG(z) (composite softmax)
//   P = E / z (bf16: the second matmul's A operand in the I/O type, a cuDNN requirement)
//   O = matmul(P, V)
// So Stats = log sum_j<=t exp(q_t.k_j / sqrt(HS)): natural log, scale included -- the flash
// kernel's lse (kernels/flash_attention.cuh), and the backward recomputes P = exp(S - Stats).
// Backward (one = 1.0 by value, the frontend's dropout-free multiplier):
//   Dsum = REDUCE_ADD(dO * O) * one                       (D_t = rowsum(dO o O), FA2)
//   S as above (matmul, scale, causal mask) ; P = EXP(S - Stats)
//   PT = RESHAPE(P) [B, NH, T, T] transposed strides, bf16 ; dV = matmul(PT, dO)
//   dP = matmul(dO, VT) ; dS = (dP * one - Dsum) * P * scale
//   dST = RESHAPE(dS) (bf16) ; dK = matmul(dST, Q) ; K = RESHAPE(KT) ; dQ = matmul(dS, K)
// dQ written directly (no fp32 dQ accumulator): the frontend's deterministic form (a non-virtual
// dQ_accum is how the backend API selects the atomics-based engine).
#include "backend/cuda/cudnn_sdpa.h"

#include <cudnn.h>
#include <fmt/format.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <cmath>
#include <initializer_list>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"

namespace baton {
namespace {

const char* const kHint =
    "precision.attention = \"flash\" (or \"auto\") uses baton's flash kernel instead; cuDNN 9 libraries "
    "(libcudnn*.so.9, with libcudnn_engines_runtime_compiled) must be on the loader path; "
    "CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr prints cuDNN's reasons";

std::string last_error() {
  char msg[512] = {0};
  cudnnGetLastErrorString(msg, sizeof(msg));
  return msg;
}

// Virtual tensors get uids from here on; the I/O tensors' uids are fixed below.
enum Uid : int64_t {
  Q = 1, KT, V, O, STATS, SCALE, NEG_FILL, ONE, DO, DQ, DK, DV, FIRST_VIRTUAL = 100
};

// The descriptors of one graph (tensors, operations, the graph, heuristics, configs, the plan),
// destroyed together. Every call is checked; `what` (the direction and shape) names the failure.
class Graph {
 public:
  Graph(cudnnHandle_t handle, std::string what) : handle_(handle), what_(std::move(what)) {}
  ~Graph() {
    for (auto it = owned_.rbegin(); it != owned_.rend(); ++it) cudnnBackendDestroyDescriptor(*it);
  }
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  const std::string& what() const { return what_; }

  void check(cudnnStatus_t st, const char* step) const {
    if (st == CUDNN_STATUS_SUCCESS) return;
    const std::string detail = last_error();
    throw Error(fmt::format("cuDNN SDPA {}: {} failed: {}{}", what_, step, cudnnGetErrorString(st),
                            detail.empty() ? "" : " (" + detail + ")"),
                kHint);
  }
  cudnnBackendDescriptor_t make(cudnnBackendDescriptorType_t type, const char* step) {
    cudnnBackendDescriptor_t d = nullptr;
    check(cudnnBackendCreateDescriptor(type, &d), step);
    owned_.push_back(d);
    return d;
  }
  template <typename T>
  void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t attr, cudnnBackendAttributeType_t type,
           int64_t n, const T* values, const char* step) {
    check(cudnnBackendSetAttribute(d, attr, type, n, values), step);
  }
  void set_desc(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t attr, cudnnBackendDescriptor_t v,
                const char* step) {
    set(d, attr, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v, step);
  }
  void finalize(cudnnBackendDescriptor_t d, const char* step) { check(cudnnBackendFinalize(d), step); }
  // An operation node of `type`: its descriptor-valued attributes (null ones left unset), finalized
  // and appended to the graph; `step` names it in an error ("create …" / "finalize …").
  struct DescAttr {
    cudnnBackendAttributeName_t attr;
    cudnnBackendDescriptor_t desc;
    const char* step;
  };
  void add_op(cudnnBackendDescriptorType_t type, const std::string& step, std::initializer_list<DescAttr> attrs) {
    cudnnBackendDescriptor_t op = make(type, ("create " + step).c_str());
    for (const DescAttr& a : attrs)
      if (a.desc != nullptr) set_desc(op, a.attr, a.desc, a.step);
    finalize(op, ("finalize " + step).c_str());
    ops_.push_back(op);
  }

  // A tensor; `uid` < 0 makes a virtual one with the next free uid.
  cudnnBackendDescriptor_t tensor(int64_t uid, cudnnDataType_t type, std::vector<int64_t> dims,
                                  std::vector<int64_t> strides, bool by_value = false) {
    const bool is_virtual = uid < 0;
    if (is_virtual) uid = next_virtual_++;
    cudnnBackendDescriptor_t t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "create tensor");
    const int64_t align = 16;
    set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "tensor data type");
    set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, int64_t(dims.size()), dims.data(), "tensor dims");
    set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, int64_t(strides.size()), strides.data(),
        "tensor strides");
    set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor uid");
    set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
    set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, "tensor virtual");
    if (by_value) set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, "tensor by value");
    finalize(t, "finalize tensor");
    return t;
  }
  // A virtual tensor shaped like `dims` (packed, row major) of `type`.
  cudnnBackendDescriptor_t virt(cudnnDataType_t type, const std::vector<int64_t>& dims) {
    std::vector<int64_t> strides(dims.size(), 1);
    for (size_t i = dims.size() - 1; i-- > 0;) strides[i] = strides[i + 1] * dims[i + 1];
    return tensor(-1, type, dims, strides);
  }
  cudnnBackendDescriptor_t scalar(int64_t uid, cudnnDataType_t type) {
    return tensor(uid, type, {1, 1, 1, 1}, {1, 1, 1, 1}, /*by_value=*/true);
  }

  // y = mode(x[, b[, t]]); `prec` the math precision; `axis` for GEN_INDEX.
  void pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                 cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t t = nullptr,
                 cudnnDataType_t prec = CUDNN_DATA_FLOAT, int64_t axis = -1) {
    cudnnBackendDescriptor_t pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "create pointwise");
    set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
    set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, "pointwise precision");
    if (axis >= 0) set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "pointwise axis");
    finalize(pw, "finalize pointwise");
    add_op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise op",
           {{CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw, "pointwise op descriptor"},
            {CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x, "pointwise op x"},
            {CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b, "pointwise op b"},
            {CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t, "pointwise op t"},
            {CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y, "pointwise op y"}});
  }
  void reduction(cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t rd = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "create reduction");
    const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    set(rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode, "reduction operator");
    set(rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &prec, "reduction precision");
    finalize(rd, "finalize reduction");
    add_op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction op",
           {{CUDNN_ATTR_OPERATION_REDUCTION_DESC, rd, "reduction op descriptor"},
            {CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x, "reduction op x"},
            {CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y, "reduction op y"}});
  }
  // c = a b over the last two dims (fp32 accumulation), batched over the first two.
  void matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
    cudnnBackendDescriptor_t mm = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR, "create matmul");
    const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &prec, "matmul precision");
    finalize(mm, "finalize matmul");
    add_op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul op",
           {{CUDNN_ATTR_OPERATION_MATMUL_DESC, mm, "matmul op descriptor"},
            {CUDNN_ATTR_OPERATION_MATMUL_ADESC, a, "matmul op a"},
            {CUDNN_ATTR_OPERATION_MATMUL_BDESC, b, "matmul op b"},
            {CUDNN_ATTR_OPERATION_MATMUL_CDESC, c, "matmul op c"}});
  }
  // y: the same elements as x seen through y's dims and strides (a transpose here).
  void reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    add_op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "reshape op",
           {{CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x, "reshape op x"},
            {CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y, "reshape op y"}});
  }

  // The operation graph, then the first deterministic engine configuration (heuristics mode A,
  // then FALLBACK) whose execution plan finalizes.
  void plan() {
    cudnnBackendDescriptor_t graph = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "create operation graph");
    set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(ops_.size()), ops_.data(),
        "operation graph ops");
    set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_, "operation graph handle");
    finalize(graph, "finalize operation graph");
    std::string tried;
    for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      const char* mode_name = mode == CUDNN_HEUR_MODE_A ? "A" : "FALLBACK";
      cudnnBackendDescriptor_t heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "create engine heuristics");
      set_desc(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph, "engine heuristics graph");
      set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "engine heuristics mode");
      const cudnnStatus_t hs = cudnnBackendFinalize(heur);
      if (hs != CUDNN_STATUS_SUCCESS) {  // no engine in this mode: say why, try the next
        tried += fmt::format("; heuristics {}: {} ({})", mode_name, cudnnGetErrorString(hs), last_error());
        continue;
      }
      int64_t count = 0;
      check(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                     &count, nullptr),
            "engine heuristics result count");
      std::vector<cudnnBackendDescriptor_t> cfgs(size_t(std::max<int64_t>(count, 0)));
      for (auto& c : cfgs) c = make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "create engine config");
      int64_t got = 0;
      check(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                     &got, cfgs.data()),
            "engine heuristics results");
      if (got == 0) tried += fmt::format("; heuristics {}: no engine", mode_name);
      for (int64_t i = 0; i < got; i++) {
        cudnnBackendDescriptor_t engine = make(CUDNN_BACKEND_ENGINE_DESCRIPTOR, "create engine");
        int64_t n = 0;
        check(cudnnBackendGetAttribute(cfgs[size_t(i)], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                       1, &n, &engine),
              "engine config's engine");
        int64_t index = -1;
        check(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index),
              "engine index");
        cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
        int64_t nn = 0;
        check(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                       CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &nn, notes),
              "engine numerical notes");
        bool deterministic = true;
        for (int64_t k = 0; k < nn; k++) deterministic &= notes[k] != CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
        if (!deterministic) {
          tried += fmt::format("; engine {} skipped (non-deterministic)", index);
          continue;
        }
        cudnnBackendDescriptor_t p = make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "create execution plan");
        set_desc(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfgs[size_t(i)], "execution plan engine config");
        set(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_, "execution plan handle");
        const cudnnStatus_t ps = cudnnBackendFinalize(p);
        if (ps != CUDNN_STATUS_SUCCESS) {
          tried += fmt::format("; engine {}: plan {} ({})", index, cudnnGetErrorString(ps), last_error());
          continue;
        }
        check(cudnnBackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                       &workspace_),
              "execution plan workspace size");
        plan_ = p;
        engine_ = index;
        heur_mode_ = mode_name;
        return;
      }
    }
    throw Error(fmt::format("cuDNN SDPA {}: no deterministic engine supports the graph{}", what_, tried),
                kHint);
  }

  // Runs the plan: `ptrs` maps every non-virtual uid (by-value ones to host scalars).
  void execute(const std::vector<std::pair<int64_t, void*>>& ptrs, void* workspace) {
    std::vector<int64_t> uids;
    std::vector<void*> data;
    for (const auto& [u, p] : ptrs) {
      // The tensors declare 16-byte alignment (the by-value scalars are host values).
      if (u != SCALE && u != NEG_FILL && u != ONE)
        BATON_REQUIRE(reinterpret_cast<uintptr_t>(p) % 16 == 0,
                      fmt::format("cuDNN SDPA {}: tensor {} at {} is not 16-byte aligned", what_, u, p),
                      "the attention's tensors must start at 16-byte boundaries (the backend's allocations do)");
      uids.push_back(u);
      data.push_back(p);
    }
    cudnnBackendDescriptor_t pack = nullptr;
    check(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack), "create variant pack");
    struct Drop {
      cudnnBackendDescriptor_t d;
      ~Drop() { cudnnBackendDestroyDescriptor(d); }
    } drop{pack};
    set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(uids.size()), uids.data(),
        "variant pack uids");
    set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(data.size()), data.data(),
        "variant pack pointers");
    set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace, "variant pack workspace");
    finalize(pack, "finalize variant pack");
    check(cudnnBackendExecute(handle_, plan_, pack), "cudnnBackendExecute");
  }

  int64_t workspace_bytes() const { return workspace_; }
  int64_t engine() const { return engine_; }
  const char* heur_mode() const { return heur_mode_; }

 private:
  cudnnHandle_t handle_;
  std::string what_;
  std::vector<cudnnBackendDescriptor_t> owned_;
  std::vector<cudnnBackendDescriptor_t> ops_;
  int64_t next_virtual_ = FIRST_VIRTUAL;
  cudnnBackendDescriptor_t plan_ = nullptr;
  int64_t workspace_ = 0;
  int64_t engine_ = -1;
  const char* heur_mode_ = "";
};

struct Dims {
  int64_t B, T, NH, HS, C;
};

// Q, KT, V as views of qkv (the header's table); `k_uid` / `v_uid` let the backward name V as VT.
cudnnBackendDescriptor_t q_tensor(Graph& g, int64_t uid, const Dims& d) {
  return g.tensor(uid, CUDNN_DATA_BFLOAT16, {d.B, d.NH, d.T, d.HS}, {3 * d.C * d.T, d.HS, 3 * d.C, 1});
}
cudnnBackendDescriptor_t transposed(Graph& g, int64_t uid, const Dims& d) {  // KT or VT
  return g.tensor(uid, CUDNN_DATA_BFLOAT16, {d.B, d.NH, d.HS, d.T}, {3 * d.C * d.T, d.HS, 1, 3 * d.C});
}
cudnnBackendDescriptor_t out_tensor(Graph& g, int64_t uid, const Dims& d) {  // O, dO: [B, T, C]
  return g.tensor(uid, CUDNN_DATA_BFLOAT16, {d.B, d.NH, d.T, d.HS}, {d.C * d.T, d.HS, d.C, 1});
}
cudnnBackendDescriptor_t stats_tensor(Graph& g, const Dims& d) {
  return g.tensor(STATS, CUDNN_DATA_FLOAT, {d.B, d.NH, d.T, 1}, {d.NH * d.T, d.T, 1, 1});
}

// S = causal_mask(scale * matmul(Q, KT)): the scores both graphs start from.
cudnnBackendDescriptor_t masked_scores(Graph& g, const Dims& d, cudnnBackendDescriptor_t q,
                                       cudnnBackendDescriptor_t kt, cudnnBackendDescriptor_t scale,
                                       cudnnBackendDescriptor_t fill) {
  const std::vector<int64_t> tt = {d.B, d.NH, d.T, d.T};
  auto s = g.virt(CUDNN_DATA_FLOAT, tt);
  g.matmul(q, kt, s);
  auto scaled = g.virt(CUDNN_DATA_FLOAT, tt);
  g.pointwise(CUDNN_POINTWISE_MUL, s, scale, scaled);
  auto row = g.virt(CUDNN_DATA_INT32, tt), col = g.virt(CUDNN_DATA_INT32, tt);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, scaled, nullptr, row, nullptr, CUDNN_DATA_INT32, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, scaled, nullptr, col, nullptr, CUDNN_DATA_INT32, 3);
  auto keep = g.virt(CUDNN_DATA_BOOLEAN, tt);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, col, keep, nullptr, CUDNN_DATA_BOOLEAN);
  auto masked = g.virt(CUDNN_DATA_FLOAT, tt);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, scaled, fill, masked, keep);
  return masked;
}

std::unique_ptr<Graph> build_forward(cudnnHandle_t h, const Dims& d, const std::string& what) {
  auto g = std::make_unique<Graph>(h, what);
  const std::vector<int64_t> tt = {d.B, d.NH, d.T, d.T}, t1 = {d.B, d.NH, d.T, 1};
  auto q = q_tensor(*g, Q, d), kt = transposed(*g, KT, d), v = q_tensor(*g, V, d);
  auto o = out_tensor(*g, O, d), stats = stats_tensor(*g, d);
  auto scale = g->scalar(SCALE, CUDNN_DATA_FLOAT), fill = g->scalar(NEG_FILL, CUDNN_DATA_FLOAT);
  auto s = masked_scores(*g, d, q, kt, scale, fill);
  auto m = g->virt(CUDNN_DATA_FLOAT, t1);
  g->reduction(CUDNN_REDUCE_TENSOR_MAX, s, m);
  auto sm = g->virt(CUDNN_DATA_FLOAT, tt), e = g->virt(CUDNN_DATA_FLOAT, tt);
  g->pointwise(CUDNN_POINTWISE_SUB, s, m, sm);
  g->pointwise(CUDNN_POINTWISE_EXP, sm, nullptr, e);
  auto z = g->virt(CUDNN_DATA_FLOAT, t1), logz = g->virt(CUDNN_DATA_FLOAT, t1);
  g->reduction(CUDNN_REDUCE_TENSOR_ADD, e, z);
  g->pointwise(CUDNN_POINTWISE_LOG, z, nullptr, logz);
  g->pointwise(CUDNN_POINTWISE_ADD, m, logz, stats);
  auto p = g->virt(CUDNN_DATA_BFLOAT16, tt);
  g->pointwise(CUDNN_POINTWISE_DIV, e, z, p);
  g->matmul(p, v, o);
  g->plan();
  return g;
}

std::unique_ptr<Graph> build_backward(cudnnHandle_t h, const Dims& d, const std::string& what) {
  auto g = std::make_unique<Graph>(h, what);
  const std::vector<int64_t> tt = {d.B, d.NH, d.T, d.T}, t1 = {d.B, d.NH, d.T, 1},
                             td = {d.B, d.NH, d.T, d.HS};
  // The transposes of a [B, NH, T, T] tensor and of KT (reshape outputs: same memory, new view).
  const std::vector<int64_t> tt_t = {d.NH * d.T * d.T, d.T * d.T, 1, d.T};
  auto q = q_tensor(*g, Q, d), kt = transposed(*g, KT, d), vt = transposed(*g, V, d);
  auto o = out_tensor(*g, O, d), dout = out_tensor(*g, DO, d), stats = stats_tensor(*g, d);
  auto dq = q_tensor(*g, DQ, d), dk = q_tensor(*g, DK, d), dv = q_tensor(*g, DV, d);
  auto scale = g->scalar(SCALE, CUDNN_DATA_FLOAT), fill = g->scalar(NEG_FILL, CUDNN_DATA_FLOAT);
  auto one = g->scalar(ONE, CUDNN_DATA_FLOAT);
  // D = rowsum(dO o O)
  auto doo = g->virt(CUDNN_DATA_FLOAT, td), dsum0 = g->virt(CUDNN_DATA_FLOAT, t1),
       dsum = g->virt(CUDNN_DATA_FLOAT, t1);
  g->pointwise(CUDNN_POINTWISE_MUL, dout, o, doo);
  g->reduction(CUDNN_REDUCE_TENSOR_ADD, doo, dsum0);
  g->pointwise(CUDNN_POINTWISE_MUL, dsum0, one, dsum);
  // P = exp(S - Stats)
  auto s = masked_scores(*g, d, q, kt, scale, fill);
  auto ss = g->virt(CUDNN_DATA_FLOAT, tt), p = g->virt(CUDNN_DATA_FLOAT, tt);
  g->pointwise(CUDNN_POINTWISE_SUB, s, stats, ss);
  g->pointwise(CUDNN_POINTWISE_EXP, ss, nullptr, p);
  // dV = P^T dO
  auto pt = g->tensor(-1, CUDNN_DATA_BFLOAT16, tt, tt_t);
  g->reshape(p, pt);
  g->matmul(pt, dout, dv);
  // dS = P o (dO V^T - D) * scale
  auto dp = g->virt(CUDNN_DATA_FLOAT, tt), dp1 = g->virt(CUDNN_DATA_FLOAT, tt),
       dp2 = g->virt(CUDNN_DATA_FLOAT, tt), ds0 = g->virt(CUDNN_DATA_FLOAT, tt),
       ds = g->virt(CUDNN_DATA_FLOAT, tt);
  g->matmul(dout, vt, dp);
  g->pointwise(CUDNN_POINTWISE_MUL, dp, one, dp1);
  g->pointwise(CUDNN_POINTWISE_SUB, dp1, dsum, dp2);
  g->pointwise(CUDNN_POINTWISE_MUL, dp2, p, ds0);
  g->pointwise(CUDNN_POINTWISE_MUL, ds0, scale, ds);
  // dK = dS^T Q ; dQ = dS K
  auto dst = g->tensor(-1, CUDNN_DATA_BFLOAT16, tt, tt_t);
  g->reshape(ds, dst);
  g->matmul(dst, q, dk);
  auto k = g->tensor(-1, CUDNN_DATA_BFLOAT16, td, {3 * d.C * d.T, d.HS, 3 * d.C, 1});
  g->reshape(kt, k);
  g->matmul(ds, k, dq);
  g->plan();
  return g;
}

}  // namespace

struct CudnnSdpa::Impl {
  cudnnHandle_t handle = nullptr;
  std::function<void*(size_t)> workspace;
  // (backward?, B, T, NH, HS) -> graph with its plan
  std::map<std::tuple<bool, int, int, int, int>, std::unique_ptr<Graph>> graphs;

  Graph& graph(bool backward, int B, int T, int C, int NH) {
    BATON_REQUIRE(B > 0 && T > 0 && NH > 0 && C % NH == 0,
                  fmt::format("cuDNN SDPA: bad shape B={} T={} C={} NH={}", B, T, C, NH),
                  "attention needs B, T, NH > 0 and NH dividing C");
    const int HS = C / NH;
    BATON_REQUIRE(supported_head_size(HS),
                  fmt::format("precision.attention = \"cudnn\": head size {} (C {} / NH {}) is not one cuDNN's "
                              "fused flash attention supports (a multiple of 8, at most 128)",
                              HS, C, NH),
                  "use precision.attention = \"auto\", or a d_model / n_head that gives such a head size");
    auto key = std::make_tuple(backward, B, T, NH, HS);
    auto it = graphs.find(key);
    if (it != graphs.end()) return *it->second;
    const Dims d{B, T, NH, HS, C};
    const std::string what =
        fmt::format("{} (B={} T={} NH={} HS={}, bf16, causal)", backward ? "backward" : "forward", B, T, NH, HS);
    auto g = backward ? build_backward(handle, d, what) : build_forward(handle, d, what);
    return *graphs.emplace(key, std::move(g)).first->second;
  }
};

bool CudnnSdpa::supported_head_size(int HS) { return HS > 0 && HS % 8 == 0 && HS <= 128; }

CudnnSdpa::CudnnSdpa(cudaStream_t stream, std::function<void*(size_t)> workspace) : impl_(std::make_unique<Impl>()) {
  impl_->workspace = std::move(workspace);
  const size_t version = cudnnGetVersion();
  BATON_REQUIRE(version / 10000 == CUDNN_MAJOR,
                fmt::format("cuDNN {} was loaded, the build expects cuDNN {}.x", version, CUDNN_MAJOR), kHint);
  const cudnnStatus_t st = cudnnCreate(&impl_->handle);
  BATON_REQUIRE(st == CUDNN_STATUS_SUCCESS,
                fmt::format("cuDNN SDPA: cudnnCreate failed: {}", cudnnGetErrorString(st)), kHint);
  const cudnnStatus_t ss = cudnnSetStream(impl_->handle, stream);
  BATON_REQUIRE(ss == CUDNN_STATUS_SUCCESS,
                fmt::format("cuDNN SDPA: cudnnSetStream failed: {}", cudnnGetErrorString(ss)), kHint);
}

CudnnSdpa::~CudnnSdpa() {
  impl_->graphs.clear();  // descriptors before the handle
  if (impl_->handle != nullptr) cudnnDestroy(impl_->handle);
}

namespace {
// The by-value scalars, read by cuDNN from host memory when the plan executes.
struct Scalars {
  float scale, fill = -FLT_MAX, one = 1.0f;
};
}  // namespace

void CudnnSdpa::forward(void* out, float* lse, const void* qkv, int B, int T, int C, int NH) {
  Graph& g = impl_->graph(false, B, T, C, NH);
  Scalars sc{1.0f / std::sqrt(float(C / NH))};
  using bf = uint16_t;  // bf16 bits: only the addresses matter here
  bf* base = const_cast<bf*>(static_cast<const bf*>(qkv));
  void* ws = g.workspace_bytes() > 0 ? impl_->workspace(size_t(g.workspace_bytes())) : nullptr;
  g.execute({{Q, base}, {KT, base + C}, {V, base + 2 * C}, {O, out}, {STATS, lse}, {SCALE, &sc.scale},
             {NEG_FILL, &sc.fill}},
            ws);
}

void CudnnSdpa::backward(void* dqkv, const void* dout, const void* out, const void* qkv, const float* lse,
                         int B, int T, int C, int NH) {
  Graph& g = impl_->graph(true, B, T, C, NH);
  Scalars sc{1.0f / std::sqrt(float(C / NH))};
  using bf = uint16_t;
  bf* base = const_cast<bf*>(static_cast<const bf*>(qkv));
  bf* dbase = static_cast<bf*>(dqkv);
  void* ws = g.workspace_bytes() > 0 ? impl_->workspace(size_t(g.workspace_bytes())) : nullptr;
  g.execute({{Q, base}, {KT, base + C}, {V, base + 2 * C}, {O, const_cast<void*>(out)},
             {DO, const_cast<void*>(dout)}, {STATS, const_cast<float*>(lse)}, {DQ, dbase}, {DK, dbase + C},
             {DV, dbase + 2 * C}, {SCALE, &sc.scale}, {NEG_FILL, &sc.fill}, {ONE, &sc.one}},
            ws);
}

std::string CudnnSdpa::summary() const {
  std::string s;
  for (const auto& [key, g] : impl_->graphs)
    s += fmt::format("{}{}: engine {} (heuristics {}), {} B workspace", s.empty() ? "" : "; ", g->what(),
                     g->engine(), g->heur_mode(), g->workspace_bytes());
  return s.empty() ? s : "cuDNN SDPA: " + s;
}

}  // namespace baton

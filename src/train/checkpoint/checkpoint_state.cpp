#include "train/checkpoint/checkpoint_state.h"

#include <algorithm>
#include <map>
#include <vector>

#include "core/timer.h"
#include "train/checkpoint/checkpoint_checksum.h"

namespace baton {

namespace {
// The boxes of one tensor this rank holds (or writes) over its host copy `local`.
void add_shards(std::vector<TensorShard>& out, const ParamSpec& spec, float* local,
                const std::string& group, const ShardLayout& layout, bool writing) {
  if (writing && spec.tp_dim < 0 && layout.tp_rank != 0) return;  // one writer per replica
  const std::vector<int64_t> full = full_shape(spec, layout.tp_size);
  for (const ShardBox& box : shard_boxes(spec, layout.tp_rank, layout.tp_size))
    out.push_back({.name = group + spec.name, .full_shape = full, .offset = box.offset,
                   .extent = box.extent, .host_data = local + box.local_offset});
}
}  // namespace

std::vector<TensorShard> table_shards(const ParamTable& table, float* flat, const std::string& group,
                                      const ShardLayout& layout, bool writing) {
  std::vector<TensorShard> out;
  out.reserve(table.size());
  for (int i = 0; i < table.size(); ++i) {
    if (writing && std::count(layout.copies.begin(), layout.copies.end(), i)) continue;  // the owner writes
    add_shards(out, table.spec(i), table.at(flat, i), group, layout, writing);
  }
  return out;
}

ShardLayout shard_layout(const dist::Layout& layout, int rank, const SequentialModel& model,
                         MPI_Comm comm, DataParallelGrads* dp, dist::Comm* tp, std::string dir) {
  const dist::RankPlace& me = layout.place(rank);
  ShardLayout s{.tp_rank = me.tp_rank, .tp_size = layout.tp(),
                .writes = (me.group == 0 || layout.virtual_workers()) && me.replica == 0, .comm = comm,
                .dir = std::move(dir), .dp = dp,
                .tp = layout.tp() > 1 ? tp : nullptr};
  for (int i : model.shared_params())
    if (!model.owns_param(i)) s.copies.push_back(i);
  return s;
}

HostTrainState::HostTrainState(const ParamTable& table, size_t flat_size,
                               std::vector<std::string> optim_groups) {
  const size_t n = std::max(flat_size, table.total());
  params.assign(n, 0.0f);
  for (std::string& g : optim_groups) optim.push_back({std::move(g), std::vector<float>(n, 0.0f)});
  buffers.assign(table.buffers_total(), 0.0f);
}

std::vector<TensorShard> HostTrainState::shards(const ParamTable& table, const ShardLayout& layout,
                                                bool writing) {
  std::vector<TensorShard> all;
  auto add = [&](const std::string& group, std::vector<float>& flat) {
    std::vector<TensorShard> s = table_shards(table, flat.data(), group, layout, writing);
    all.insert(all.end(), std::make_move_iterator(s.begin()), std::make_move_iterator(s.end()));
  };
  add(kParamsGroup, params);
  for (OptimState& o : optim) add(o.group, o.flat);
  for (int i = 0; i < table.num_buffers(); ++i)
    add_shards(all, table.buffer_spec(i), table.buffer_at(buffers.data(), i), kBuffersGroup, layout, writing);
  return all;
}

CheckpointMeta make_checkpoint_meta(const Config& cfg, int64_t step, double last_lr, const RunPosition& pos) {
  CheckpointMeta m;
  m.step = step;
  m.tokens_consumed = step * int64_t(cfg.train.global_batch) * cfg.model.seq_len;
  m.data_position = step + pos.data_offset;
  m.guard_state = pos.guard_state;
  m.seed = cfg.train.seed;
  m.lr = {cfg.optim.decay, cfg.optim.lr, cfg.optim.min_lr, last_lr, cfg.optim.warmup_steps,
          cfg.train.steps};
  m.config_toml = cfg.to_toml();
  m.layout.tp = cfg.parallel.tp;
  m.layout.pp = cfg.parallel.pp;
  m.layout.dp = cfg.dp;
  m.layout.world = int64_t(cfg.parallel.tp) * cfg.parallel.pp * cfg.dp;
  return m;
}

namespace {
// Optimizer state (one of m, v) from the optimizer's layout into the flat host buffer `flat`,
// complete on every data-parallel rank.
void state_to_host_flat(Backend& be, const float* state, size_t state_size, std::vector<float>& staging,
                        std::vector<float>& flat, const ShardLayout& layout) {
  if (!layout.dp || !layout.dp->zero1()) {
    be.to_host(flat.data(), state, state_size * sizeof(float));
    return;
  }
  staging.resize(state_size);
  be.to_host(staging.data(), state, state_size * sizeof(float));
  layout.dp->state_to_flat(staging.data(), flat.data());
  layout.dp->gather_flat(flat.data());
}

void host_flat_to_state(Backend& be, float* state, size_t state_size, std::vector<float>& staging,
                        const std::vector<float>& flat, const ShardLayout& layout) {
  if (!layout.dp || !layout.dp->zero1()) {
    be.to_device(state, flat.data(), state_size * sizeof(float));
    return;
  }
  staging.assign(state_size, 0.0f);
  layout.dp->flat_to_state(flat.data(), staging.data());
  be.to_device(state, staging.data(), state_size * sizeof(float));
}
}  // namespace

SaveResult save_train_state(const Config& cfg, SequentialModel& model, Optimizer& opt, HostTrainState& host,
                            int64_t step, double last_lr, const ShardLayout& layout, const RunPosition& pos) {
  Timer t;
  Backend& be = model.backend();
  be.to_host(host.params.data(), model.params(), model.table().total() * sizeof(float));
  if (!host.buffers.empty())
    be.to_host(host.buffers.data(), model.buffers(), host.buffers.size() * sizeof(float));
  const std::vector<Optimizer::State> st = opt.state();
  BATON_ASSERT(st.size() == host.optim.size(), "{} optimizer state tensors, host state for {}", st.size(),
               host.optim.size());
  for (size_t i = 0; i < st.size(); ++i)
    state_to_host_flat(be, st[i].data, opt.state_size(), host.state, host.optim[i].flat, layout);
  const std::vector<TensorShard> shards =
      layout.writes ? host.shards(model.table(), layout, true) : std::vector<TensorShard>{};
  SaveResult r = save_checkpoint(layout.dir.empty() ? cfg.checkpoint_dir() : layout.dir,
                                 make_checkpoint_meta(cfg, step, last_lr, pos),
                                 shards, cfg.checkpoint.keep, layout.comm);
  r.seconds = t.seconds();
  return r;
}

namespace {
// The checksum is a sum over elements (checkpoint_checksum.h), so the partial sums of the boxes
// the tensor-parallel ranks read add up to the whole tensor's: one all-reduce verifies every
// tensor that no single rank read whole. Same verdict on every rank.
void verify_split_tensors(const CheckpointReader& reader, const std::vector<TensorShard>& shards,
                          dist::Comm& tp, const std::string& path) {
  std::map<std::string, std::pair<uint64_t, int64_t>> partial;  // name -> (sum, elements)
  for (const TensorShard& s : shards) {
    auto& p = partial[s.name];
    p.first += checksum_box(s.host_data, s.full_shape, s.offset, s.extent);
    p.second += s.numel();
  }
  std::vector<std::string> names;
  std::vector<int64_t> sums;  // uint64 sums carried as int64 bits; addition wraps the same way
  for (const auto& [name, p] : partial) {
    if (p.second == reader.find(name)->numel()) continue;  // read whole here: already verified
    names.push_back(name);
    sums.push_back(static_cast<int64_t>(p.first));
  }
  tp.all_reduce(sums.data(), sums.size(), dist::DType::I64, dist::ReduceOp::SUM);
  for (size_t i = 0; i < names.size(); ++i) {
    const uint64_t stored = reader.find(names[i])->checksum, got = static_cast<uint64_t>(sums[i]);
    if (got != stored)
      throw CheckpointDamaged(
          fmt::format("checksum mismatch in tensor '{}' of checkpoint '{}' (stored {}, computed {} "
                      "over the tensor-parallel ranks)", names[i], path, checksum_hex(stored),
                      checksum_hex(got)),
          "the file is damaged; resume from another checkpoint (`baton ckpt verify PATH` checks one)");
  }
}
}  // namespace

CheckpointMeta read_train_state(const std::string& path, const ParamTable& table, HostTrainState& host,
                                const ShardLayout& layout) {
  CheckpointReader reader(path);
  const std::vector<TensorShard> shards = host.shards(table, layout, false);
  reader.read(shards);
  if (layout.tp && layout.tp->size() > 1) verify_split_tensors(reader, shards, *layout.tp, path);
  return reader.meta();
}

void restore_train_state(HostTrainState& host, SequentialModel& model, Optimizer& opt,
                         const ShardLayout& layout) {
  Backend& be = model.backend();
  be.to_device(model.params(), host.params.data(), model.table().total() * sizeof(float));
  if (!host.buffers.empty())
    be.to_device(model.buffers(), host.buffers.data(), host.buffers.size() * sizeof(float));
  model.refresh_compute_params();
  const std::vector<Optimizer::State> st = opt.state();
  for (size_t i = 0; i < st.size(); ++i)
    host_flat_to_state(be, st[i].data, opt.state_size(), host.state, host.optim[i].flat, layout);
}

}  // namespace baton

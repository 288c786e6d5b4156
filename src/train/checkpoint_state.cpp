#include "train/checkpoint_state.h"

#include "core/timer.h"

namespace baton {

std::vector<TensorShard> table_shards(const ParamTable& table, float* flat, const std::string& group) {
  std::vector<TensorShard> out;
  out.reserve(table.size());
  for (int i = 0; i < table.size(); ++i)
    out.push_back(whole_tensor(group + table.spec(i).name, table.spec(i).shape, table.at(flat, i)));
  return out;
}

HostTrainState::HostTrainState(const ParamTable& table)
    : params(table.total()), m(table.total()), v(table.total()) {}

std::vector<TensorShard> HostTrainState::shards(const ParamTable& table) {
  std::vector<TensorShard> all;
  for (auto [group, flat] : {std::pair{kParamsGroup, &params}, {kAdamMGroup, &m}, {kAdamVGroup, &v}}) {
    std::vector<TensorShard> s = table_shards(table, flat->data(), group);
    all.insert(all.end(), std::make_move_iterator(s.begin()), std::make_move_iterator(s.end()));
  }
  return all;
}

CheckpointMeta make_checkpoint_meta(const Config& cfg, int64_t step, double last_lr) {
  CheckpointMeta m;
  m.step = step;
  m.tokens_consumed = step * int64_t(cfg.train.global_batch) * cfg.model.seq_len;
  m.data_position = step;
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

SaveResult save_train_state(const Config& cfg, GptModel& model, AdamW& opt, HostTrainState& host,
                            int64_t step, double last_lr) {
  Timer t;
  Backend& be = model.backend();
  const size_t bytes = model.table().total() * sizeof(float);
  be.to_host(host.params.data(), model.params(), bytes);
  be.to_host(host.m.data(), opt.m(), bytes);
  be.to_host(host.v.data(), opt.v(), bytes);
  const std::vector<TensorShard> shards = host.shards(model.table());
  SaveResult r = save_checkpoint(cfg.checkpoint_dir(), make_checkpoint_meta(cfg, step, last_lr),
                                 shards, cfg.checkpoint.keep, MPI_COMM_NULL);
  r.seconds = t.seconds();
  return r;
}

CheckpointMeta read_train_state(const std::string& path, const ParamTable& table, HostTrainState& host) {
  CheckpointReader reader(path);
  reader.read(host.shards(table));
  return reader.meta();
}

void restore_train_state(HostTrainState& host, GptModel& model, AdamW& opt) {
  Backend& be = model.backend();
  const size_t bytes = model.table().total() * sizeof(float);
  be.to_device(model.params(), host.params.data(), bytes);
  be.to_device(opt.m(), host.m.data(), bytes);
  be.to_device(opt.v(), host.v.data(), bytes);
}

}  // namespace baton

// WSP for virtual workers of several stages; see wsp_pipeline.h for the protocol and its sources.
#include "train/wsp_pipeline.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/timer.h"

namespace baton {
namespace {

// Messages on the VW's communicator (its own: no clash with the pipeline's).
constexpr int kTagCount = 101, kTagIds = 102, kTagPush = 103, kTagPullClock = 104, kTagPullData = 105;

}  // namespace

std::vector<dist::TensorSpan> GlobalParams::spans() const {
  std::vector<dist::TensorSpan> out;
  for (int i = 0; i < table.size(); ++i) out.push_back({table.offset(i), table.numel(i)});
  return out;
}

GlobalParams global_params(const ModelBuilder& builder, const Backend& be) {
  GlobalParams g;
  for (int l = 0; l < builder.num_layers(); ++l) {
    builder.make_layer(l, TensorParallel{}, be, Recompute::NONE)->add_params(g.table);
    g.layer.resize(static_cast<size_t>(g.table.size()), l);
  }
  return g;
}

std::vector<int> local_placement(const GlobalParams& global, const std::vector<VirtualWorker>& vws,
                                 const std::vector<std::vector<std::vector<int>>>& layers) {
  const int n = static_cast<int>(vws.size());
  std::vector<int> shard;
  for (int i = 0; i < global.table.size(); ++i) {
    const int v = i % n, l = global.layer[static_cast<size_t>(i)];
    const std::vector<std::vector<int>>& ranges = layers[static_cast<size_t>(v)];
    size_t s = 0;
    while (s < ranges.size() && !(ranges[s][0] <= l && l < ranges[s][1])) ++s;
    BATON_ASSERT(s < ranges.size(), "VW {} has no stage holding layer {}", v, l);
    shard.push_back(vws[static_cast<size_t>(v)].stages[s].rank);
  }
  return shard;
}

wsp::VersionVector pulled_version(int num_vw, int64_t c_global, int vw, int pushed, int nm) {
  wsp::VersionVector v(num_vw);
  for (int k = 0; k < num_vw; ++k) v.add_range(k, 1, static_cast<int>(c_global) * nm);
  v.add_range(vw, static_cast<int>(c_global) * nm + 1, pushed * nm);
  return v;
}

int observed_staleness(const wsp::VersionVector& w, int p, int num_vw) {
  int reach = p - 1;
  for (int k = 0; k < num_vw; ++k) reach = std::min(reach, w.prefix(k));
  return p - 1 - reach;
}

WspStageSync::WspStageSync(const WspStageSetup& setup)
    : s_(setup), clock_(setup.vw, setup.params, static_cast<int>(setup.minibatches), nullptr, setup.first_wave),
      c_global_(setup.first_wave), pushed_(setup.first_wave) {
  BATON_ASSERT(s_.vw_comm, "WSP stage without its VW's communicator");
  // A resumed run's weights hold every VW's waves before the first (the checkpoint's w_global).
  if (s_.first_wave > 0) merges_.emplace_back(s_.first_wave * s_.params.nm, s_.first_wave);
}

void WspStageSync::to_host(const WeightVersions& versions, int64_t version, std::vector<float>& out) {
  model_->backend().to_host(out.data(), versions.weights(static_cast<int>(version)), out.size() * sizeof(float));
}

void WspStageSync::pack(const std::vector<float>& local, const std::vector<int>& which, std::vector<float>& out) const {
  out.clear();
  const ParamTable& t = model_->table();
  for (int i : which) out.insert(out.end(), t.at(local.data(), i), t.at(local.data(), i) + t.numel(i));
}

void WspStageSync::bind(SequentialModel& model, const GlobalParams& global, dist::ParamServer& server,
                        std::vector<float>& w0) {
  model_ = &model;
  global_ = &global;
  const ParamTable& t = model.table();
  for (int i = 0; i < t.size(); ++i) {
    const int g = global_->table.find(t.spec(i).name);
    BATON_ASSERT(g >= 0 && global_->table.numel(g) == t.numel(i), "tensor {} is not in the global layout",
                 t.spec(i).name);
    global_of_.push_back(g);
    held_.push_back(i);
    if (model.owns_param(i)) owned_.push_back(i);
  }
  anchor_.assign(model.flat_size(), 0.0f);
  host_ = delta_ = anchor_;
  model.backend().to_host(anchor_.data(), model.params(), anchor_.size() * sizeof(float));
  dist::Comm& comm = *s_.vw_comm;
  const auto globals = [&](const std::vector<int>& local) {
    std::vector<int> g;
    for (int i : local) g.push_back(global_of_[i]);
    return g;
  };
  if (s_.per_stage) {  // ED-local: this stage pushes its owned tensors and pulls its held ones
    push_sel_ = server.select(globals(owned_));
    pull_sel_ = server.select(globals(held_));
    client_ = std::make_unique<dist::ServerClient>(server, push_sel_, pull_sel_, s_.vw, global_->floats(), s_.background);
    full_.assign(global_->floats(), 0.0f);
  } else if (leader()) {
    client_ = std::make_unique<dist::ServerClient>(server, server.all(), server.all(), s_.vw, global_->floats(),
                                                   s_.background);
  }
  // The leader learns every stage's tensors (owned, then held) and gathers w0 of the model.
  const int k = comm.size();
  if (!leader()) {
    for (const std::vector<int>& list : {globals(owned_), globals(held_)}) {
      int n = static_cast<int>(list.size());
      comm.send(&n, 1, DType::I32, 0, kTagCount)->wait();
      comm.send(list.data(), list.size(), DType::I32, 0, kTagIds)->wait();
    }
    pack(anchor_, owned_, packed_);
    comm.send(packed_.data(), packed_.size(), DType::F32, 0, kTagPush)->wait();
    return;
  }
  stage_owned_.assign(k, {});
  stage_held_.assign(k, {});
  stage_owned_[0] = globals(owned_);
  stage_held_[0] = globals(held_);
  for (int s = 1; s < k; ++s)
    for (std::vector<int>* list : {&stage_owned_[s], &stage_held_[s]}) {
      int n = 0;
      comm.recv(&n, 1, DType::I32, s, kTagCount)->wait();
      list->resize(n);
      comm.recv(list->data(), n, DType::I32, s, kTagIds)->wait();
    }
  full_.assign(global_->floats(), 0.0f);
  gather_owned(anchor_, w0);
}

void WspStageSync::gather_owned(const std::vector<float>& mine, std::vector<float>& full) {
  dist::Comm& comm = *s_.vw_comm;
  const ParamTable& gt = global_->table;
  full.assign(global_->floats(), 0.0f);
  for (int s = 0; s < comm.size(); ++s) {
    if (s == 0) {
      pack(mine, owned_, packed_);
    } else {
      size_t n = 0;
      for (int g : stage_owned_[s]) n += gt.numel(g);
      packed_.resize(n);
      comm.recv(packed_.data(), n, DType::F32, s, kTagPush)->wait();
    }
    size_t pos = 0;
    for (int g : stage_owned_[s]) {
      std::copy_n(packed_.data() + pos, gt.numel(g), gt.at(full.data(), g));
      pos += gt.numel(g);
    }
  }
}

void WspStageSync::after_update(int64_t update, WeightVersions& versions, int64_t base) {
  const std::optional<wsp::WorkerClock::Push> push = clock_.finish();
  BATON_ASSERT(clock_.finished() == update, "VW {}: update {} finished minibatch {}", s_.vw, update, clock_.finished());
  if (!push) return;
  Timer timer;
  // ũ_s: every update of the wave on this stage's layers (the weights moved by merges in between
  // moved the anchor too).
  to_host(versions, update - base, host_);
  const ParamTable& t = model_->table();
  std::vector<float> u(host_.size(), 0.0f);
  for (int i : held_)
    for (size_t j = t.offset(i), e = j + t.numel(i); j < e; ++j) {
      u[j] = host_[j] - anchor_[j];
      anchor_[j] = host_[j];
    }
  ++pushed_;
  dist::Comm& comm = *s_.vw_comm;
  for (dist::RequestPtr& r : sends_) r->wait();
  sends_.clear();
  sendbufs_.clear();
  if (s_.per_stage) {  // this stage's part of the VW's ũ, straight to the server
    const ParamTable& gt = global_->table;
    for (int i : owned_) std::copy_n(t.at(u.data(), i), t.numel(i), gt.at(full_.data(), global_of_[i]));
    client_->push(push->wave - s_.first_wave, full_);
    // On the server before this stage goes on: a shard counts a VW's wave in parts, which must
    // arrive wave by wave — the stages' synchronous pipeline keeps stage 0's part of wave w ahead
    // of stage 1's part of wave w + 1 only if each push is done when its stage moves on (pulls
    // still run beside the compute).
    client_->drain();
  } else if (!leader()) {
    sendbufs_.emplace_back();
    pack(u, owned_, sendbufs_.back());
    sends_.push_back(comm.send(sendbufs_.back().data(), sendbufs_.back().size(), DType::F32, 0, kTagPush));
  } else {
    // The VW's ũ: this stage's and every other stage's (they finished the wave before us).
    gather_owned(u, full_);
    client_->push(push->wave - s_.first_wave, full_);  // w_global += ũ once every VW pushed the wave
  }
  own_.emplace_back(push->wave, std::move(u));
  push_ += timer.seconds();
  if (const std::optional<int> needs = clock_.waiting_for()) {  // the end of clock c requests its pull
    requested_.reset();
    if (client()) client_->request_pull(*needs - s_.first_wave);
  }
}

void WspStageSync::after_compute(int64_t minibatch, WorkTime t) {
  if (s_.stretch) stretched_ += s_.stretch->stretch(t, minibatch);
}

void WspStageSync::note_wait() {
  const double waited = requested_.seconds();
  wait_ += waited;
  wait_total_ += waited;
}

std::vector<float> WspStageSync::local_part(const std::vector<float>& global_flat) const {
  const ParamTable& gt = global_->table;
  const ParamTable& t = model_->table();
  std::vector<float> mine(model_->flat_size(), 0.0f);
  for (int i : held_) std::copy_n(gt.at(global_flat.data(), global_of_[i]), t.numel(i), t.at(mine.data(), i));
  return mine;
}

std::vector<float> WspStageSync::leader_send_pull(int64_t x) {
  dist::Comm& comm = *s_.vw_comm;
  const ParamTable& gt = global_->table;
  for (dist::RequestPtr& r : sends_) r->wait();
  sends_.clear();
  sendbufs_.clear();
  note_wait();
  pull_msg_[0] = x;
  std::memcpy(&pull_msg_[1], &wait_total_, sizeof(double));
  std::memcpy(&pull_msg_[2], &idle_total_, sizeof(double));
  for (int s = 1; s < comm.size(); ++s) {
    sendbufs_.emplace_back();
    for (int g : stage_held_[s]) sendbufs_.back().insert(sendbufs_.back().end(), gt.at(full_.data(), g), gt.at(full_.data(), g) + gt.numel(g));
    sends_.push_back(comm.send(pull_msg_, 3, DType::I64, s, kTagPullClock));
    sends_.push_back(comm.send(sendbufs_.back().data(), sendbufs_.back().size(), DType::F32, s, kTagPullData));
  }
  return local_part(full_);
}

std::vector<float> WspStageSync::take_returned_pull(int64_t x) {
  if (!s_.per_stage) return leader_send_pull(x);
  note_wait();  // ED-local: this stage's own pull, nothing to send on
  return local_part(full_);
}

std::vector<float> WspStageSync::receive_pull(int64_t& x) {
  int64_t msg[3] = {0, 0, 0};
  dist::Comm& comm = *s_.vw_comm;
  comm.recv(msg, 3, DType::I64, 0, kTagPullClock)->wait();
  x = msg[0];
  const ParamTable& t = model_->table();
  size_t n = 0;
  for (int i : held_) n += t.numel(i);
  packed_.resize(n);
  comm.recv(packed_.data(), n, DType::F32, 0, kTagPullData)->wait();
  std::vector<float> mine(model_->flat_size(), 0.0f);
  size_t pos = 0;
  for (int i : held_) {
    std::copy_n(packed_.data() + pos, t.numel(i), t.at(mine.data(), i));
    pos += t.numel(i);
  }
  // The VW's waiting is its leader's (this stage waited for the leader, not the server).
  double leader_wait = 0, leader_idle = 0;
  std::memcpy(&leader_wait, &msg[1], sizeof(double));
  std::memcpy(&leader_idle, &msg[2], sizeof(double));
  wait_ += std::max(0.0, leader_wait - wait_total_);
  idle_ += std::max(0.0, leader_idle - idle_total_);
  wait_total_ = leader_wait;
  idle_total_ = leader_idle;
  return mine;
}

bool WspStageSync::merge_at_meeting() {
  const std::optional<int> needs = clock_.waiting_for();
  if (!needs) return false;
  int64_t x = 0;
  std::vector<float> mine;
  if (client()) {  // every VW drained its pushes before the meeting: pull all of them
    client_->cancel_pull();
    client_->request_pull(pushed_ - s_.first_wave);
    x = client_->wait_pull(full_) + s_.first_wave;
    mine = take_returned_pull(x);
  } else {
    mine = receive_pull(x);
  }
  merge(x, mine, nullptr, 0);
  return true;
}

void WspStageSync::before_forward(int64_t minibatch, WeightVersions& versions, int64_t base) {
  if (const std::optional<int> needs = clock_.waiting_for()) {
    if (client()) {
      if (!client_->pull_requested()) client_->request_pull(*needs - s_.first_wave);
      // A pull that has returned (the client tries it beside the compute) is taken now (fresher
      // weights); the one that gates this minibatch is waited for, sleeping (dist/server_client.h).
      std::optional<int64_t> x;
      if (clock_.startable()) {
        x = client_->take_pull(full_);
      } else {
        double blocked = 0;
        x = client_->wait_pull(full_, &blocked);
        idle_ += blocked;
        idle_total_ += blocked;
      }
      if (x) merge(*x + s_.first_wave, take_returned_pull(*x + s_.first_wave), &versions, base);
    } else if (!clock_.startable()) {
      // The leader pulled before its own forward of this minibatch: X and this stage's part.
      int64_t x = 0;
      std::vector<float> mine = receive_pull(x);
      merge(x, mine, &versions, base);
    }
  }
  const int p = clock_.start();
  BATON_ASSERT(p == minibatch, "VW {}: forward of minibatch {} while the clock starts {}", s_.vw, minibatch, p);
  // Minibatch p reads version v = max(p − Nm, 0): own updates 1 … v and every VW's waves before
  // the X of the last merge at or below v.
  const int nm = s_.params.nm, v = std::max(p - nm, 0);
  int64_t x = 0;
  for (const auto& [b, mx] : merges_)
    if (b <= v) x = mx;
  wsp::VersionVector w(s_.num_vw);
  for (int k = 0; k < s_.num_vw; ++k) w.add_range(k, 1, static_cast<int>(x) * nm);
  w.add_range(s_.vw, static_cast<int>(x) * nm + 1, v);
  staleness_ = observed_staleness(w, p, s_.num_vw);
  BATON_ASSERT(staleness_ <= wsp::s_global(s_.params.staleness, nm), "VW {}: minibatch {} staleness {} > s_global",
               s_.vw, p, staleness_);
}

void WspStageSync::merge(int64_t x, const std::vector<float>& global_local, WeightVersions* versions, int64_t base) {
  const int c = pushed_ - 1, b = (c + 1) * s_.params.nm;  // the pull of clock c; minibatch (c+2)·Nm reads b
  while (!own_.empty() && own_.front().first < x) own_.pop_front();
  Backend& be = model_->backend();
  if (versions) {
    to_host(*versions, b - base, host_);
  } else {  // a drained pipeline: the weights are the model's parameters (= version b)
    be.to_host(host_.data(), model_->params(), host_.size() * sizeof(float));
  }
  // Version b becomes the target exactly (and the anchor of the wave after it, which it is);
  // later versions move by the same Δ, keeping the own updates they hold on top.
  const ParamTable& t = model_->table();
  std::vector<float> target = host_;
  std::fill(delta_.begin(), delta_.end(), 0.0f);
  for (int i : held_)
    for (size_t j = t.offset(i), e = j + t.numel(i); j < e; ++j) {
      target[j] = global_local[j];
      for (const auto& [wave, u] : own_) target[j] += u[j];
      delta_[j] = target[j] - host_[j];
      anchor_[j] = target[j];
    }
  const auto rebase = [&](int v, float* buf) {
    if (v == b - base) {
      be.to_device(buf, target.data(), target.size() * sizeof(float));
      return;
    }
    be.to_host(host_.data(), buf, host_.size() * sizeof(float));
    for (size_t j = 0; j < host_.size(); ++j) host_[j] += delta_[j];
    be.to_device(buf, host_.data(), host_.size() * sizeof(float));
  };
  if (versions) {
    versions->for_each_from(static_cast<int>(b - base), rebase);
  } else {
    rebase(static_cast<int>(b - base), model_->params());
    model_->refresh_compute_params();
  }
  clock_.complete_pull(pulled_version(s_.num_vw, x, s_.vw, pushed_, s_.params.nm));
  merges_.emplace_back(b, x);
  c_global_ = x;
}

void WspStageSync::drain() {
  if (client_) client_->drain();
}

void WspStageSync::finish() {
  for (dist::RequestPtr& r : sends_) r->wait();
  sends_.clear();
  sendbufs_.clear();
  client_.reset();  // its pushes on the server, its thread joined
}

}  // namespace baton

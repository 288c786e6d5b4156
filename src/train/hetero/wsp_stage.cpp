// WSP on one stage rank of a virtual worker: the shared rule and the three roles; see wsp_stage.h.
#include "train/hetero/wsp_stage.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/stop_signal.h"
#include "train/hetero/wsp_turns.h"

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

std::vector<int> local_placement(const GlobalParams& global, const dist::Layout& layout) {
  const int n = layout.num_groups();
  std::vector<int> shard;
  for (int i = 0; i < global.table.size(); ++i) {
    const int v = i % n, l = global.layer[static_cast<size_t>(i)];
    const dist::PipelineSpec& p = layout.pipeline(v);
    int s = 0;
    while (s < p.pp && !p.stages[static_cast<size_t>(s)].contains(l)) ++s;
    BATON_ASSERT(s < p.pp, "VW {} has no stage holding layer {}", v, l);
    shard.push_back(layout.rank_of(v, layout.pipe_rank_of(v, s, 0), 0));
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

// ---- the rule, shared by every role ----

WspStage::WspStage(const WspStageSetup& setup)
    : s_(setup), clock_(setup.vw, setup.params, static_cast<int>(setup.minibatches)) {
  BATON_ASSERT(s_.vw_comm, "WSP stage without its VW's communicator");
}

void WspStage::start_at(int first_wave) {
  BATON_ASSERT(model_ == nullptr, "WSP stage started after bind()");
  first_wave_ = pushed_ = first_wave;
  c_global_ = first_wave;
  clock_ = wsp::WorkerClock(s_.vw, s_.params, static_cast<int>(s_.minibatches), nullptr, first_wave);
  // A resumed run's weights hold every VW's waves before the first (the checkpoint's w_global).
  const int64_t start = int64_t{first_wave} * s_.params.nm;
  anchor_tag_ = pulled_version(s_.num_vw, first_wave, s_.vw, first_wave, s_.params.nm);
  tags_.clear();
  tags_[start] = anchor_tag_;
}

void WspStage::set_trace(std::unique_ptr<WspTraceFile> trace, bool deterministic) {
  trace_ = std::move(trace);
  this->trace({{"e", "run"}, {"vw", s_.vw}, {"stage", s_.vw_comm->rank()}, {"stages", s_.vw_comm->size()},
               {"num_vw", s_.num_vw}, {"nm", s_.params.nm}, {"D", s_.params.staleness},
               {"first_step", int64_t{first_wave_} * s_.params.nm}, {"deterministic", deterministic}});
}

// Callers test trace_ first: the event's JSON (version vectors included) is built only for a trace.
void WspStage::trace(nlohmann::json event) const {
  if (s_.turns && s_.turns->in_turn()) event["turn"] = s_.turns->turn();
  trace_->write(event);
}

WspStage::~WspStage() = default;

void WspStage::span(pipeline::Activity what, double start) const {
  if (s_.timeline) s_.timeline->span(what, start, pipeline::Timeline::now());
}

void WspStage::to_host(WeightVersions* versions, int64_t version, std::vector<float>& out) {
  const float* w = versions ? versions->weights(static_cast<int>(version)) : model_->params();
  model_->backend().to_host(out.data(), w, out.size() * sizeof(float));
}

void WspStage::pack(const std::vector<float>& local, const std::vector<int>& which, std::vector<float>& out) const {
  out.clear();
  const ParamTable& t = model_->table();
  for (int i : which) out.insert(out.end(), t.at(local.data(), i), t.at(local.data(), i) + t.numel(i));
}

std::vector<float> WspStage::local_part(const std::vector<float>& global_flat) const {
  const ParamTable& gt = global_->table;
  const ParamTable& t = model_->table();
  std::vector<float> mine(model_->flat_size(), 0.0f);
  for (int i : held_) std::copy_n(gt.at(global_flat.data(), global_of_[i]), t.numel(i), t.at(mine.data(), i));
  return mine;
}

void WspStage::note_wait() {
  const double waited = requested_.seconds();
  wait_ += waited;
  wait_total_ += waited;
}

void WspStage::bind(SequentialModel& model, const GlobalParams& global, dist::ParamServer& server,
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
  open(server);
  // The first stage learns every stage's tensors (owned, then held) and gathers w0 of the model.
  dist::Comm& comm = *s_.vw_comm;
  const auto globals = [&](const std::vector<int>& local) {
    std::vector<int> g;
    for (int i : local) g.push_back(global_of_[i]);
    return g;
  };
  if (!first_stage()) {
    for (const std::vector<int>& list : {globals(owned_), globals(held_)}) {
      int n = static_cast<int>(list.size());
      comm.send(&n, 1, DType::I32, 0, kTagCount)->wait();
      comm.send(list.data(), list.size(), DType::I32, 0, kTagIds)->wait();
    }
    pack(anchor_, owned_, packed_);
    comm.send(packed_.data(), packed_.size(), DType::F32, 0, kTagPush)->wait();
    return;
  }
  const int k = comm.size();
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
  gather_owned(anchor_, w0);
}

void WspStage::gather_owned(const std::vector<float>& mine, std::vector<float>& full) {
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

void WspStage::post_stop() {
  if (!s_.board || stop_posted_) return;
  s_.board->raise(pushed_);  // this stage's completed waves: c_global cannot be beyond them
  stop_posted_ = true;
}

void WspStage::read_board() {
  if (!s_.board || stop_at_) return;
  if (stop_requested()) post_stop();
  const std::optional<int64_t> w = s_.board->read();
  if (!w) return;
  stop_posted_ = true;
  const int64_t at = (*w + s_.params.staleness + 2) * s_.params.nm;
  if (at < s_.minibatches) stop_at_ = at;
}

void WspStage::before_forward(int64_t minibatch, int64_t reads, WeightVersions* versions, int64_t base) {
  if (s_.turns) s_.turns->begin(Turn::FORWARD, minibatch);
  if (const std::optional<int> needs = clock_.waiting_for()) {
    // A pull that has returned (the client tries it beside the compute; or forward_ready took it
    // while the pipeline ran backwards) is merged now (fresher weights); the one that gates this
    // minibatch is waited for, sleeping (dist/server_client.h).
    std::optional<Pulled> got = std::exchange(early_, std::nullopt);
    const bool gated = !clock_.startable();
    if (!got) {
      request(*needs);
      if (!gated) {
        got = take();
      } else {
        const double start = pipeline::Timeline::now();
        got = wait_gated();
        span(pipeline::Activity::WSP_WAIT, start);
      }
    }
    if (got) {
      const double start = pipeline::Timeline::now();
      merge(*got, versions, base, reads);
      span(pipeline::Activity::WSP_PULL, start);
      if (trace_) trace({{"e", "merge"}, {"x", got->x}, {"b", int64_t{pushed_} * s_.params.nm}, {"mb", minibatch},
             {"gated", gated}, {"meeting", false}, {"w", to_json(anchor_tag_)}});
    }
  }
  read_board();  // after the gate, right before the minibatch starts (see the file comment)
  BATON_ASSERT(!stop_at_ || minibatch <= *stop_at_, "VW {}: minibatch {} starts after the agreed stop at {}", s_.vw,
               minibatch, *stop_at_);
  const int p = clock_.start();
  BATON_ASSERT(p == minibatch, "VW {}: forward of minibatch {} while the clock starts {}", s_.vw, minibatch, p);
  // Minibatch p reads version `reads`: the updates its tag says it holds. Versions below it are
  // never read again (minibatches start in order).
  const auto held = tags_.find(reads);
  BATON_ASSERT(held != tags_.end(), "VW {}: minibatch {} reads version {}, which has no tag", s_.vw, p, reads);
  const wsp::VersionVector& w = held->second;
  staleness_ = observed_staleness(w, p, s_.num_vw);
  if (trace_)
    trace({{"e", "start"}, {"mb", p}, {"reads", reads}, {"c_local", clock_.c_local()}, {"c_global", c_global_},
           {"staleness", staleness_}, {"w", to_json(w)}});
  BATON_ASSERT(staleness_ <= wsp::s_global(s_.params.staleness, s_.params.nm),
               "VW {}: minibatch {} staleness {} > s_global", s_.vw, p, staleness_);
  tags_.erase(tags_.begin(), held);
  if (s_.turns) s_.turns->end();
}

bool WspStage::forward_ready(int64_t /*minibatch*/) {
  if (follows() || early_ || clock_.startable()) return true;
  const std::optional<int> needs = clock_.waiting_for();
  if (!needs) return true;
  request(*needs);
  early_ = take();
  return early_.has_value();
}

void WspStage::after_update(int64_t update, WeightVersions* versions, int64_t base) {
  if (s_.turns) s_.turns->begin(Turn::UPDATE, update);
  const std::optional<wsp::WorkerClock::Push> wave = clock_.finish();
  BATON_ASSERT(clock_.finished() == update, "VW {}: update {} finished minibatch {}", s_.vw, update, clock_.finished());
  // Version `update` = version update − 1 plus minibatch `update`'s step (StepRunner::on_update).
  const auto before = tags_.find(update - 1);
  BATON_ASSERT(before != tags_.end(), "VW {}: update {} applies to version {}, which has no tag", s_.vw, update,
               update - 1);
  wsp::VersionVector& now = tags_[update] = before->second;
  now.add(s_.vw, static_cast<int>(update));
  if (trace_) trace({{"e", "update"}, {"mb", update}});
  if (wave) {
    const double start = pipeline::Timeline::now();
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
    push(wave->wave, u);
    wsp::VersionVector u_tag = now.without(anchor_tag_);
    anchor_tag_ = now;
    if (trace_) trace({{"e", "push"}, {"wave", wave->wave}, {"mb", update}, {"u", to_json(u_tag)}});
    own_.push_back({wave->wave, std::move(u), std::move(u_tag)});
    push_ += timer.seconds();
    span(pipeline::Activity::WSP_PUSH, start);
    if (const std::optional<int> needs = clock_.waiting_for()) {  // the end of clock c requests its pull
      requested_.reset();
      request(*needs);
      if (trace_) trace({{"e", "pull"}, {"clock", wave->wave}, {"needs", *needs}, {"mb", update}});
    }
  }
  if (s_.turns) s_.turns->end();
}

void WspStage::after_compute(int64_t minibatch, WorkTime t) {
  if (s_.stretch) stretched_ += s_.stretch->stretch(t, minibatch);
}

void WspStage::merge(const Pulled& pulled, WeightVersions* versions, int64_t base, int64_t latest) {
  const int b = pushed_ * s_.params.nm;  // the end of the last pushed wave: minibatch b + Nm reads b
  while (!own_.empty() && own_.front().wave < pulled.x) own_.pop_front();
  // Version b becomes the target exactly and later versions move by the same Δ, keeping the own
  // updates they hold on top. The anchor is version b (set at its push; no merge since), so Δ
  // needs no copy of version b, which a one-stage VW no longer keeps.
  const ParamTable& t = model_->table();
  std::vector<float> target = anchor_;
  std::fill(delta_.begin(), delta_.end(), 0.0f);
  for (int i : held_)
    for (size_t j = t.offset(i), e = j + t.numel(i); j < e; ++j) {
      target[j] = pulled.part[j];
      for (const OwnWave& own : own_) target[j] += own.u[j];
      delta_[j] = target[j] - anchor_[j];
      anchor_[j] = target[j];
    }
  Backend& be = model_->backend();
  const auto rebase = [&](int64_t v, float* buf) {
    if (v == b) {
      be.to_device(buf, target.data(), target.size() * sizeof(float));
      return;
    }
    be.to_host(host_.data(), buf, host_.size() * sizeof(float));
    for (size_t j = 0; j < host_.size(); ++j) host_[j] += delta_[j];
    be.to_device(buf, host_.data(), host_.size() * sizeof(float));
  };
  if (versions) {
    versions->for_each_from(static_cast<int>(b - base), [&](int v, float* buf) { rebase(base + v, buf); });
  } else {
    BATON_ASSERT(latest >= b, "VW {}: a merge at version {} before the wave's end {}", s_.vw, latest, b);
    rebase(latest, model_->params());
    model_->refresh_compute_params();
  }
  // The same on the tags: the target holds w_global's (every VW's waves before X: the server's
  // word) and the own pushed waves' updates; each version ≥ b keeps what it held beyond version b.
  wsp::VersionVector target_tag = pulled_version(s_.num_vw, pulled.x, s_.vw, static_cast<int>(pulled.x), s_.params.nm);
  for (const OwnWave& own : own_) target_tag.merge(own.tag);
  const auto at_b = tags_.find(b);
  BATON_ASSERT(at_b == tags_.end() || at_b->second == anchor_tag_, "VW {}: version {} is not the wave start", s_.vw, b);
  for (auto it = tags_.lower_bound(b); it != tags_.end(); ++it) {
    wsp::VersionVector moved = target_tag;
    moved.merge(it->second.without(anchor_tag_));
    it->second = std::move(moved);
  }
  anchor_tag_ = std::move(target_tag);
  clock_.complete_pull(pulled_version(s_.num_vw, pulled.x, s_.vw, pushed_, s_.params.nm));
  c_global_ = pulled.x;
}

bool WspStage::merge_at_meeting() {
  if (!clock_.waiting_for()) return false;
  const Pulled pulled = meeting_pull();
  merge(pulled, nullptr, 0, clock_.finished());  // a drained pipeline: the parameters are the latest version
  if (trace_)
    trace({{"e", "merge"}, {"x", pulled.x}, {"b", int64_t{pushed_} * s_.params.nm}, {"mb", clock_.finished() + 1},
           {"gated", false}, {"meeting", true}, {"w", to_json(anchor_tag_)}});
  return true;
}

void WspStage::drain() { drain_client(); }

void WspStage::finish() { close(); }

void WspStage::trace_traffic(const dist::ParamServer& server) {
  const dist::ParamServer::Traffic& t = server.traffic();
  vw_sent_.resize(static_cast<size_t>(s_.vw_comm->size()), 0);
  if (trace_)
    trace({{"e", "traffic"}, {"waves", pushed_ - first_wave_}, {"server_push", t.push}, {"server_pull", t.pull},
           {"vw_sent", vw_sent_}});
}

// ---- the roles ----
namespace {

// The VW's first stage with hetero.placement = "default": its VW's client of the server for the
// whole model; it gathers the other stages' parts of each wave's ũ and sends each its part of
// every pull.
class Leader final : public WspStage {
 public:
  explicit Leader(const WspStageSetup& setup) : WspStage(setup) {}

 private:
  void open(dist::ParamServer& server) override {
    client_ = std::make_unique<dist::ServerClient>(server, server.all(), server.all(), s_.vw, global_->floats(),
                                                   s_.background);
    full_.assign(global_->floats(), 0.0f);
  }
  void push(int64_t wave, const std::vector<float>& u) override {
    wait_sends();
    gather_owned(u, full_);  // the VW's ũ: this stage's and every other stage's (they finished the wave before us)
    client_->push(wave - first_wave_, full_);  // w_global += ũ once every VW pushed the wave
  }
  void request(int64_t needs) override {
    if (!client_->pull_requested()) client_->request_pull(needs - first_wave_);
  }
  std::optional<Pulled> take() override {
    const std::optional<int64_t> x = client_->take_pull(full_);
    if (!x) return std::nullopt;
    return send_on(*x + first_wave_);
  }
  Pulled wait_gated() override {
    double blocked = 0;
    const Timer timer;
    const int64_t x = s_.turns ? s_.turns->gated_pull(*client_, full_) : client_->wait_pull(full_, &blocked);
    if (s_.turns) blocked = timer.seconds();
    idle_ += blocked;
    idle_total_ += blocked;
    return send_on(x + first_wave_);
  }
  Pulled meeting_pull() override {  // every VW drained its pushes before the meeting: pull all of them
    client_->cancel_pull();
    client_->request_pull(pushed_ - first_wave_);
    return send_on(client_->wait_pull(full_) + first_wave_);
  }
  void drain_client() override { client_->drain(); }
  void close() override {
    wait_sends();
    client_.reset();  // its pushes on the server, its thread joined
  }

  // A pull of X returned into full_: every follower gets X, the VW's waiting so far and its part;
  // returns this stage's.
  Pulled send_on(int64_t x) {
    dist::Comm& comm = *s_.vw_comm;
    const ParamTable& gt = global_->table;
    wait_sends();
    note_wait();
    msg_[0] = x;
    std::memcpy(&msg_[1], &wait_total_, sizeof(double));
    std::memcpy(&msg_[2], &idle_total_, sizeof(double));
    for (int s = 1; s < comm.size(); ++s) {
      sendbufs_.emplace_back();
      for (int g : stage_held_[s])
        sendbufs_.back().insert(sendbufs_.back().end(), gt.at(full_.data(), g), gt.at(full_.data(), g) + gt.numel(g));
      sends_.push_back(comm.send(msg_, 3, DType::I64, s, kTagPullClock));
      count_sent(s, sendbufs_.back().size());
      sends_.push_back(comm.send(sendbufs_.back().data(), sendbufs_.back().size(), DType::F32, s, kTagPullData));
    }
    return {x, local_part(full_)};
  }
  void wait_sends() {
    for (dist::RequestPtr& r : sends_) r->wait();
    sends_.clear();
    sendbufs_.clear();
  }

  int64_t msg_[3] = {0, 0, 0};  // the last pull's X, wait and idle totals (bits)
  std::vector<std::vector<float>> sendbufs_;
  std::vector<dist::RequestPtr> sends_;
};

// A later stage with hetero.placement = "default": sends its part of each wave's ũ to its leader
// and merges the parts of pulls the leader sends, at the minibatches they gate.
class Follower final : public WspStage {
 public:
  explicit Follower(const WspStageSetup& setup) : WspStage(setup) {}

 private:
  void open(dist::ParamServer&) override {}
  void push(int64_t, const std::vector<float>& u) override {
    if (send_) send_->wait();
    pack(u, owned_, sendbuf_);
    send_ = s_.vw_comm->send(sendbuf_.data(), sendbuf_.size(), DType::F32, 0, kTagPush);
    count_sent(0, sendbuf_.size());
  }
  void request(int64_t) override {}
  bool follows() const override { return true; }
  std::optional<Pulled> take() override { return std::nullopt; }  // the leader's pulls come when they gate
  Pulled wait_gated() override { return receive(); }
  Pulled meeting_pull() override { return receive(); }
  void close() override {
    if (send_) send_->wait();
    send_.reset();
  }

  // X and this stage's part from the leader, which pulled before its own forward of this minibatch.
  Pulled receive() {
    int64_t msg[3] = {0, 0, 0};
    dist::Comm& comm = *s_.vw_comm;
    comm.recv(msg, 3, DType::I64, 0, kTagPullClock)->wait();
    const ParamTable& t = model_->table();
    size_t n = 0;
    for (int i : held_) n += t.numel(i);
    packed_.resize(n);
    comm.recv(packed_.data(), n, DType::F32, 0, kTagPullData)->wait();
    Pulled p{msg[0], std::vector<float>(model_->flat_size(), 0.0f)};
    size_t pos = 0;
    for (int i : held_) {
      std::copy_n(packed_.data() + pos, t.numel(i), t.at(p.part.data(), i));
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
    return p;
  }

  std::vector<float> sendbuf_;
  dist::RequestPtr send_;
};

// Any stage with hetero.placement = "local" (ED-local): a client of its own that pushes its owned
// tensors of ũ and pulls its held ones.
class LocalClient final : public WspStage {
 public:
  explicit LocalClient(const WspStageSetup& setup) : WspStage(setup) {}

 private:
  void open(dist::ParamServer& server) override {
    std::vector<int> owned, held;
    for (int i : owned_) owned.push_back(global_of_[i]);
    for (int i : held_) held.push_back(global_of_[i]);
    push_sel_ = server.select(owned);
    pull_sel_ = server.select(held);
    client_ = std::make_unique<dist::ServerClient>(server, push_sel_, pull_sel_, s_.vw, global_->floats(),
                                                   s_.background);
    full_.assign(global_->floats(), 0.0f);
  }
  void push(int64_t wave, const std::vector<float>& u) override {
    const ParamTable& gt = global_->table;
    const ParamTable& t = model_->table();
    for (int i : owned_) std::copy_n(t.at(u.data(), i), t.numel(i), gt.at(full_.data(), global_of_[i]));
    client_->push(wave - first_wave_, full_);
    // On the server before this stage goes on: a shard counts a VW's wave in parts, which must
    // arrive wave by wave — the stages' synchronous pipeline keeps stage 0's part of wave w ahead
    // of stage 1's part of wave w + 1 only if each push is done when its stage moves on (pulls
    // still run beside the compute).
    client_->drain();
  }
  void request(int64_t needs) override {
    if (!client_->pull_requested()) client_->request_pull(needs - first_wave_);
  }
  std::optional<Pulled> take() override {
    const std::optional<int64_t> x = client_->take_pull(full_);
    if (!x) return std::nullopt;
    note_wait();
    return Pulled{*x + first_wave_, local_part(full_)};
  }
  Pulled wait_gated() override {
    double blocked = 0;
    const int64_t x = client_->wait_pull(full_, &blocked);
    idle_ += blocked;
    idle_total_ += blocked;
    note_wait();
    return {x + first_wave_, local_part(full_)};
  }
  Pulled meeting_pull() override {
    client_->cancel_pull();
    client_->request_pull(pushed_ - first_wave_);
    const int64_t x = client_->wait_pull(full_);
    note_wait();
    return {x + first_wave_, local_part(full_)};
  }
  void drain_client() override { client_->drain(); }
  void close() override { client_.reset(); }

  dist::ParamServer::Selection push_sel_, pull_sel_;
};

}  // namespace

std::unique_ptr<WspStage> WspStage::make(const WspStageSetup& setup) {
  if (setup.local_client) return std::make_unique<LocalClient>(setup);
  if (setup.vw_comm->rank() == 0) return std::make_unique<Leader>(setup);
  return std::make_unique<Follower>(setup);
}

}  // namespace baton

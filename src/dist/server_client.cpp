// The parameter server's client thread (see server_client.h).
#include "dist/server_client.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "core/error.h"
#include "core/timer.h"
#include "dist/comm.h"
#include "dist/guard.h"

namespace baton::dist {

ServerClient::ServerClient(ParamServer& server, const ParamServer::Selection& pushes,
                           const ParamServer::Selection& pulls, int vw, size_t flat, bool background)
    : server_(server), push_sel_(pushes), pull_sel_(pulls), vw_(vw), flat_(flat) {
  if (!background) return;
  pulled_data_.assign(flat_, 0.0f);
  thread_ = std::thread([this] { run(); });
}

ServerClient::~ServerClient() {
  if (!thread_.joinable()) return;
  std::unique_lock<std::mutex> lock(mutex_);
  if (std::uncaught_exceptions() > 0) {
    // An error unwinds this rank: drop the queue. The thread may sit in an MPI call that never
    // returns (a peer is gone); the job is about to end (dist/guard.h), so do not wait for it long.
    pushes_.clear();
    stop_ = true;
    wake_.notify_all();
    if (!done_.wait_for(lock, std::chrono::seconds(5), [&] { return exited_; })) {
      lock.unlock();
      thread_.detach();
      return;
    }
  } else {
    done_.wait(lock, [&] { return (pushes_.empty() && !pushing_) || error_; });  // the waves already handed over
    stop_ = true;
    wake_.notify_all();
  }
  lock.unlock();
  thread_.join();
}

void ServerClient::rethrow_locked() const {
  if (error_) std::rethrow_exception(error_);
}

void ServerClient::run() {
  mark_background_thread();
  std::vector<float> buf(flat_, 0.0f);  // the pull in progress; swapped with pulled_data_ when it returns
  int attempt = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  // An error here (an MPI failure, a protocol violation) ends the job from this thread: the training
  // thread may be blocked in a collective that the failed exchange keeps the other ranks from
  // reaching, and would never get to rethrow it — a hang instead of an error.
  const auto fail = [&] {
    error_ = std::current_exception();
    pushing_ = false;
    exited_ = true;
    done_.notify_all();
    std::string what = "unknown error", hint;
    try {
      std::rethrow_exception(error_);
    } catch (const Error& e) {
      what = e.what(), hint = e.hint();
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    fail_job(fmt::format("VW {}'s parameter server client: {}", vw_, what), hint);  // aborts with several ranks
    MpiRuntime::abort(1);
  };
  while (!stop_) {
    if (!pushes_.empty()) {
      std::pair<int64_t, std::vector<float>> wave = std::move(pushes_.front());
      pushes_.pop_front();
      pushing_ = true;
      lock.unlock();
      try {
        server_.push(vw_, wave.first, wave.second.data(), push_sel_);
      } catch (...) {
        lock.lock();
        return fail();
      }
      lock.lock();
      pushing_ = false;
      attempt = 0;
      done_.notify_all();
      continue;
    }
    if (pull_needs_ && !pulled_) {
      const int64_t needs = *pull_needs_;
      const uint64_t gen = pull_gen_;
      lock.unlock();
      std::optional<int64_t> c;
      try {
        c = server_.try_pull(needs, buf.data(), pull_sel_);
      } catch (...) {
        lock.lock();
        return fail();
      }
      lock.lock();
      if (gen != pull_gen_) continue;  // cancelled (or replaced) while it ran
      if (c) {
        pulled_ = c;
        pulled_data_.swap(buf);
        pull_needs_.reset();
        attempt = 0;
        done_.notify_all();
      } else {  // not yet: sleep (never spin: the ranks sharing this core compute), wake for a push
        const auto backoff = std::chrono::microseconds(std::min(2000, 50 << std::min(attempt++, 6)));
        wake_.wait_for(lock, backoff, [&] { return stop_ || !pushes_.empty(); });
      }
      continue;
    }
    wake_.wait(lock, [&] { return stop_ || !pushes_.empty() || (pull_needs_ && !pulled_); });
  }
  exited_ = true;
  done_.notify_all();
}

void ServerClient::push(int64_t wave, std::vector<float> delta) {
  BATON_ASSERT(delta.size() == flat_, "server client: a push of {} floats, not {}", delta.size(), flat_);
  if (!background()) return server_.push(vw_, wave, delta.data(), push_sel_);
  std::lock_guard<std::mutex> lock(mutex_);
  rethrow_locked();
  pushes_.emplace_back(wave, std::move(delta));
  wake_.notify_all();
}

void ServerClient::request_pull(int64_t needs) {
  BATON_ASSERT(!needs_, "server client: a pull of {} requested while the pull of {} is outstanding", needs, *needs_);
  needs_ = needs;
  if (!background()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  rethrow_locked();
  pull_needs_ = needs;
  pulled_.reset();
  ++pull_gen_;
  wake_.notify_all();
}

std::optional<int64_t> ServerClient::take_pull(std::vector<float>& out) {
  if (!needs_) return std::nullopt;
  BATON_ASSERT(out.size() == flat_, "server client: a pull into {} floats, not {}", out.size(), flat_);
  std::optional<int64_t> c;
  if (!background()) {
    c = server_.try_pull(*needs_, out.data(), pull_sel_);
  } else {
    std::lock_guard<std::mutex> lock(mutex_);
    rethrow_locked();
    if (pulled_) {
      out.swap(pulled_data_);
      c = std::exchange(pulled_, std::nullopt);
    }
  }
  if (c) needs_.reset();
  return c;
}

int64_t ServerClient::wait_pull(std::vector<float>& out, double* blocked_s) {
  BATON_ASSERT(needs_.has_value(), "server client: waiting for a pull that was not requested");
  BATON_ASSERT(out.size() == flat_, "server client: a pull into {} floats, not {}", out.size(), flat_);
  if (!background()) {
    const int64_t c = server_.pull(*needs_, out.data(), pull_sel_, blocked_s);
    needs_.reset();
    return c;
  }
  Timer timer;
  std::unique_lock<std::mutex> lock(mutex_);
  {
    const std::string whom = ParamServer::waiting_for(*needs_);
    BlockedTimer blocked("parameter server pull", &whom);
    done_.wait(lock, [&] { return pulled_.has_value() || error_; });
  }
  rethrow_locked();
  out.swap(pulled_data_);
  const int64_t c = *std::exchange(pulled_, std::nullopt);
  needs_.reset();
  if (blocked_s) *blocked_s = timer.seconds();
  return c;
}

void ServerClient::cancel_pull() {
  needs_.reset();
  if (!background()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  rethrow_locked();
  pull_needs_.reset();
  pulled_.reset();
  ++pull_gen_;
}

void ServerClient::drain() {
  if (!background()) return;
  std::unique_lock<std::mutex> lock(mutex_);
  BlockedTimer blocked("parameter server push");
  done_.wait(lock, [&] { return (pushes_.empty() && !pushing_) || error_; });
  rethrow_locked();
}

}  // namespace baton::dist

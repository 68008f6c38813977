#include "checkpoint/async_saver.hpp"

#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "checkpoint/shard_writer.hpp"

namespace axonn {

using Clock = std::chrono::steady_clock;

AsyncSaver::AsyncSaver(std::filesystem::path dir, int rank, SaverOptions options)
    : dir_(std::move(dir)), rank_(rank), options_(std::move(options)) {}

AsyncSaver::~AsyncSaver() {
  if (worker_.joinable()) worker_.join();
  if (error_) {
    const char* what = stop_.stop_requested() ? "was left uncommitted" : "failed and was never observed";
    try {
      std::rethrow_exception(error_);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "axonn checkpoint: async save of step %lld (rank %d) %s: %s\n",
                   static_cast<long long>(error_step_), rank_, what, e.what());
    } catch (...) {
      std::fprintf(stderr, "axonn checkpoint: async save of step %lld (rank %d) %s\n",
                   static_cast<long long>(error_step_), rank_, what);
    }
  }
}

void AsyncSaver::rethrow_pending() {
  if (pending_commit_) {
    last_commit_ = std::move(pending_commit_);
    pending_commit_.reset();
  }
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

bool AsyncSaver::poll() {
  if (worker_.joinable()) {
    if (!done_.load(std::memory_order_acquire)) return false;
    worker_.join();
  }
  rethrow_pending();
  return true;
}

void AsyncSaver::wait() {
  if (worker_.joinable()) worker_.join();
  rethrow_pending();
}

void AsyncSaver::save(int64_t step, std::span<const TensorSlice> slices, std::optional<CommitSpec> commit) {
  const auto t0 = Clock::now();
  wait();
  const auto t1 = Clock::now();
  for (const TensorSlice& s : slices) {
    validate_rect(s.global_shape, s.rect, "tensor '" + s.name + "'");
    if (s.data == nullptr) throw std::invalid_argument("tensor '" + s.name + "': slice data is null");
  }
  buffers_.resize(slices.size());
  staged_.clear();
  for (size_t i = 0; i < slices.size(); ++i) {
    const size_t n = static_cast<size_t>(element_count(slices[i].rect));
    buffers_[i].resize(n);
    std::memcpy(buffers_[i].data(), slices[i].data, n * sizeof(float));
    staged_.push_back(TensorSlice{slices[i].name, slices[i].global_shape, slices[i].rect, buffers_[i].data()});
  }
  last_wait_ = t1 - t0;
  last_copy_ = Clock::now() - t1;
  done_.store(false, std::memory_order_release);
  worker_ = std::thread([this, step, commit = std::move(commit)] {
    const auto start = Clock::now();
    try {
      if (options_.write_instead) {
        options_.write_instead(step, staged_, commit);
      } else {
        write_shard(dir_, step, rank_, staged_, options_.save_token);
        // The other ranks began their shards of about as many bytes at the same step boundary:
        // once abandoned, a commit waits as long again as this one took for theirs.
        const auto own_write = std::chrono::ceil<std::chrono::milliseconds>(Clock::now() - start);
        if (commit)
          pending_commit_ = axonn::commit(dir_, step, commit->expected_ranks, commit->metadata, options_.keep,
                                          options_.commit_timeout, options_.save_token, commit->protected_steps,
                                          stop_.get_token(), own_write);
      }
    } catch (...) {
      error_ = std::current_exception();
      error_step_ = step;
    }
    if (options_.on_written) options_.on_written(step, start, Clock::now());
    done_.store(true, std::memory_order_release);
  });
}

}  // namespace axonn

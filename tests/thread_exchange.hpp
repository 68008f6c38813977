#pragma once
// An in-memory Exchange among threads of one test process (the same protocol as PMIx:
// put, fence, get), and run_ranks to run one body per rank on its own thread.
#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "comm/exchange.hpp"

namespace axonn::test {

// put/fence/get among `size` threads; fence is a barrier, so values put before it are
// visible after it, as with a collecting PMIx fence.
class ThreadExchangeHub {
 public:
  explicit ThreadExchangeHub(int size) : size_(size) {}
  int size() const { return size_; }
  void put(int rank, const std::string& key, const std::vector<char>& v) {
    std::lock_guard lock(mu_);
    values_[{rank, key}] = v;
  }
  // A barrier that gives up after 20 s, so a rank that never arrives fails the test.
  void fence() {
    std::unique_lock lock(mu_);
    const long generation = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      arrived_cv_.notify_all();
      return;
    }
    if (!arrived_cv_.wait_for(lock, std::chrono::seconds(20), [&] { return generation_ != generation; }))
      throw std::runtime_error("fence: not every rank arrived within 20 s");
  }
  std::vector<char> get(int rank, const std::string& key) {
    std::lock_guard lock(mu_);
    auto it = values_.find({rank, key});
    if (it == values_.end()) throw std::runtime_error("missing " + key);
    return it->second;
  }

 private:
  int size_;
  std::mutex mu_;
  std::condition_variable arrived_cv_;
  int arrived_ = 0;
  long generation_ = 0;
  std::map<std::pair<int, std::string>, std::vector<char>> values_;
};

class ThreadExchange final : public Exchange {
 public:
  ThreadExchange(ThreadExchangeHub& hub, int rank) : hub_(hub), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return hub_.size(); }
  void put(const std::string& key, const std::vector<char>& value) override { hub_.put(rank_, key, value); }
  void fence() override { hub_.fence(); }
  std::vector<char> get(int rank, const std::string& key) override { return hub_.get(rank, key); }

 private:
  ThreadExchangeHub& hub_;
  int rank_;
};

// Runs body(rank, exchange) on `world` threads and rethrows the first failure.
template <typename Body>
void run_ranks(int world, Body body) {
  ThreadExchangeHub hub(world);
  std::vector<std::thread> threads;
  std::mutex mu;
  std::string failure;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        ThreadExchange exchange(hub, r);
        body(r, exchange);
      } catch (const std::exception& e) {
        std::lock_guard lock(mu);
        failure += "rank " + std::to_string(r) + ": " + e.what() + "\n";
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(failure.empty()) << failure;
}

}  // namespace axonn::test

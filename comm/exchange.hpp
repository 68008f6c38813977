#pragma once
// Bootstrap key-value exchange among the ranks of one job: what PMIx put/commit/
// fence/get provides. Communicators find each other through it, so no shared files
// and no hand-picked ports are needed.
#include <string>
#include <vector>

namespace axonn {

class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Publish a value under key for the other ranks; visible to them after fence().
  virtual void put(const std::string& key, const std::vector<char>& value) = 0;
  // Collective over all ranks of the job: afterwards every put before it is readable.
  virtual void fence() = 0;
  // The value `rank` put under key before the last fence; throws if it did not.
  virtual std::vector<char> get(int rank, const std::string& key) = 0;
};

}  // namespace axonn

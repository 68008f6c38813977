// read_samples: the trainer's per-step copy of its samples out of the token stream.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "trainer/data/token_data.hpp"

namespace axonn {

void read_samples(const TokenData& data, const SampleOrder& order, int64_t first, int count, int sequence,
                  int32_t* inputs, int32_t* targets) {
  // The order must describe this stream: then every window [start, start+T] lies inside it,
  // since start <= (sample_count-1)*T and sample_count*T + 1 <= size.
  const int64_t expected_samples = data.size() > 1 && sequence > 0 ? (data.size() - 1) / sequence : 0;
  if (sequence != order.sequence() || order.sample_count() != expected_samples)
    throw std::invalid_argument("read_samples: the sample order was built for " + std::to_string(order.sample_count()) +
                                " samples of sequence " + std::to_string(order.sequence()) + ", but " +
                                data.description() + " at sequence " + std::to_string(sequence) + " holds " +
                                std::to_string(expected_samples));
  if (first < 0 || count < 0)
    throw std::invalid_argument("read_samples: first (" + std::to_string(first) + ") and count (" +
                                std::to_string(count) + ") must be >= 0");
  const int32_t* tokens = data.data();
  for (int i = 0; i < count; ++i) {
    const int32_t* window = tokens + order.sample_start(first + i);
    const int64_t row = int64_t{i} * sequence;
    std::copy_n(window, sequence, inputs + row);       // tokens [s, s+T)
    std::copy_n(window + 1, sequence, targets + row);  // tokens [s+1, s+T+1): the next token of each input
  }
}

}  // namespace axonn

#include "trainer/train/tensorboard_events.hpp"

#include <isa-l/crc.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "core/wall_clock.hpp"
#include "trainer/train/tensorboard_event.pb.h"

namespace axonn {
namespace {

constexpr const char* kFileVersion = "brain.Event:2";  // what TensorBoard's own writers put first
constexpr uint32_t kCrcMaskDelta = 0xa282ead8u;

// Appends the low `bytes` bytes of v, least significant first.
void append_little_endian(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xffu));
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

std::string fix_hint() { return " (set run.dir to a writable directory with free space)"; }

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  // crc32_iscsi inverts neither the initial value nor the result, so the standard CRC-32C is
  // ~crc32_iscsi(data, ~0) (the unit test checks 0xE3069283). Its length is an int: longer
  // data goes in pieces, each continuing the CRC of those before. ISA-L only reads the buffer.
  auto* bytes = const_cast<unsigned char*>(static_cast<const unsigned char*>(data));
  constexpr size_t kPiece = size_t{1} << 30;
  unsigned int crc = 0xFFFFFFFFu;
  while (size > 0) {
    const size_t n = std::min(size, kPiece);
    crc = crc32_iscsi(bytes, static_cast<int>(n), crc);
    bytes += n;
    size -= n;
  }
  return crc ^ 0xFFFFFFFFu;
}

uint32_t mask_crc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kCrcMaskDelta; }

uint32_t unmask_crc32c(uint32_t masked) {
  const uint32_t rotated = masked - kCrcMaskDelta;
  return (rotated >> 17) | (rotated << 15);
}

TensorBoardEvents::TensorBoardEvents(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const auto seconds =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  const std::string name = "events.out.tfevents." + std::to_string(seconds) + "." + host_name() + "." +
                           std::to_string(static_cast<long long>(getpid()));
  // "x": create, never open an existing file, so two writers cannot interleave their records.
  for (int suffix = 0; file_ == nullptr; ++suffix) {
    path_ = dir / (suffix == 0 ? name : name + "." + std::to_string(suffix));
    file_.reset(std::fopen(path_.c_str(), "wbx"));
    const int error = errno;
    if (file_ == nullptr && (error != EEXIST || suffix == 1000))
      throw std::runtime_error("cannot create the TensorBoard events file " + path_.string() + ": " +
                               std::strerror(error) + fix_hint());
  }
  tensorboard::Event event;
  event.set_wall_time(unix_seconds_now());
  event.set_file_version(kFileVersion);
  write_record(event.SerializeAsString());
}

void TensorBoardEvents::write_scalars(int64_t step, double wall_time, const std::vector<TensorBoardScalar>& scalars) {
  tensorboard::Event event;
  event.set_wall_time(wall_time);
  event.set_step(step);
  tensorboard::Summary* summary = event.mutable_summary();
  for (const TensorBoardScalar& s : scalars) {
    tensorboard::Summary::Value* value = summary->add_value();
    value->set_tag(s.tag);
    value->set_simple_value(static_cast<float>(s.value));
  }
  write_record(event.SerializeAsString());
}

void TensorBoardEvents::write_record(const std::string& data) {
  std::string record;
  record.reserve(8 + 4 + data.size() + 4);
  append_little_endian(record, data.size(), 8);
  append_little_endian(record, mask_crc32c(crc32c(record.data(), 8)), 4);
  record += data;
  append_little_endian(record, mask_crc32c(crc32c(data.data(), data.size())), 4);
  if (std::fwrite(record.data(), 1, record.size(), file_.get()) != record.size() || std::fflush(file_.get()) != 0) {
    const int error = errno;
    throw std::runtime_error("cannot write the TensorBoard events file " + path_.string() + ": " +
                             std::strerror(error) + fix_hint());
  }
}

}  // namespace axonn

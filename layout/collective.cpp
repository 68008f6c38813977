#include "layout/collective.hpp"

namespace axonn {

const char* collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_reduce: return "all_reduce";
    case CollectiveKind::all_gather: return "all_gather";
    case CollectiveKind::reduce_scatter: return "reduce_scatter";
    case CollectiveKind::broadcast: return "broadcast";
    case CollectiveKind::barrier: return "barrier";
    case CollectiveKind::all_to_all: return "all_to_all";
  }
  return "unknown";
}

double bus_factor(CollectiveKind kind, int n) {
  if (n <= 1) return 0.0;
  const double ring = static_cast<double>(n - 1) / n;
  switch (kind) {
    case CollectiveKind::all_reduce: return 2.0 * ring;
    case CollectiveKind::all_gather:
    case CollectiveKind::reduce_scatter:
    case CollectiveKind::all_to_all: return ring;
    case CollectiveKind::broadcast: return 1.0;
    case CollectiveKind::barrier: return 0.0;
  }
  return 0.0;
}

int ring_steps(CollectiveKind kind, int n) {
  if (n <= 1) return 0;
  return kind == CollectiveKind::all_reduce ? 2 * (n - 1) : n - 1;
}

}  // namespace axonn

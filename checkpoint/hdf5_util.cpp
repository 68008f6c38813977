#include "checkpoint/hdf5_util.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <type_traits>

#include "checkpoint/checkpoint_error.hpp"
#include "checkpoint/fs_util.hpp"

namespace axonn::h5 {

static_assert(std::is_same_v<Id, hid_t>, "h5::Id must be hid_t");

namespace {

// HDF5's error stack (and its auto-print setting) is per thread in the thread-safe build:
// every entry point below calls this first (a thread_local check).
void quiet_this_thread() {
  thread_local bool done = false;
  if (!done) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    done = true;
  }
}

herr_t collect_error(unsigned, const H5E_error2_t* e, void* client) {
  auto* out = static_cast<std::vector<std::string>*>(client);
  if (e->desc != nullptr && e->desc[0] != '\0') {
    std::string line = std::string(e->func_name ? e->func_name : "?") + ": " + e->desc;
    for (char& c : line) c = c == '\n' ? ' ' : c;  // sec2 write errors embed ctime()'s newline
    if (out->empty() || out->back() != line) out->push_back(std::move(line));
  }
  return 0;
}

Id check_id(Id id, const std::string& file, const std::string& op) {
  if (id < 0) fail(file, op);
  return id;
}

void check(herr_t rc, const std::string& file, const std::string& op) {
  if (rc < 0) fail(file, op);
}

std::vector<hsize_t> to_hsize(const std::vector<int64_t>& v) { return std::vector<hsize_t>(v.begin(), v.end()); }

Handle simple_space(const std::vector<int64_t>& dims, const std::string& file) {
  if (dims.empty()) return Handle(check_id(H5Screate(H5S_NULL), file, "create dataspace"), H5Sclose);
  const auto d = to_hsize(dims);
  return Handle(check_id(H5Screate_simple(static_cast<int>(d.size()), d.data(), nullptr), file, "create dataspace"),
                H5Sclose);
}

Handle file_access_plist(const std::string& file) {
  Handle fapl(check_id(H5Pcreate(H5P_FILE_ACCESS), file, "create file access list"), H5Pclose);
  check(H5Pset_file_locking(fapl.get(), false, true), file, "disable file locking");
  check(H5Pset_alignment(fapl.get(), 64 * 1024, 4096), file, "set alignment");
  return fapl;
}

Handle vlen_string_type(const std::string& file) {
  Handle t(check_id(H5Tcopy(H5T_C_S1), file, "copy string type"), H5Tclose);
  check(H5Tset_size(t.get(), H5T_VARIABLE), file, "set string size");
  check(H5Tset_cset(t.get(), H5T_CSET_UTF8), file, "set string charset");
  return t;
}

void select_box(Id space, const std::vector<int64_t>& offset, const std::vector<int64_t>& count,
                const std::string& file) {
  const auto o = to_hsize(offset);
  const auto c = to_hsize(count);
  check(H5Sselect_hyperslab(space, H5S_SELECT_SET, o.data(), nullptr, c.data(), nullptr), file, "select hyperslab");
}

// Builds the attribute `name` (replacing one of that name) and writes `data`. dims {}:
// scalar; dims with no elements: a null dataspace (h5py reads it as an empty value).
void write_attr(Id obj, const std::string& name, Id type, const std::vector<int64_t>& dims, const void* data,
                const std::string& file) {
  quiet_this_thread();
  if (H5Aexists(obj, name.c_str()) > 0) check(H5Adelete(obj, name.c_str()), file, "delete attribute " + name);
  int64_t elements = 1;
  for (int64_t d : dims) elements *= d;
  Handle space = dims.empty() ? Handle(check_id(H5Screate(H5S_SCALAR), file, "create scalar space"), H5Sclose)
                              : simple_space(elements == 0 ? std::vector<int64_t>{} : dims, file);
  Handle attr(check_id(H5Acreate2(obj, name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT), file,
                       "create attribute " + name),
              H5Aclose);
  if (elements > 0) check(H5Awrite(attr.get(), type, data), file, "write attribute " + name);
  attr.close(file, "close attribute " + name);
}

int64_t attr_points(Id attr, const std::string& file, const std::string& name) {
  Handle space(check_id(H5Aget_space(attr), file, "get space of attribute " + name), H5Sclose);
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n < 0) fail(file, "count attribute " + name);
  return n;
}

template <typename T>
std::vector<T> read_numeric(const Handle& attr, Id memtype, const std::string& file, const std::string& name) {
  std::vector<T> out(static_cast<size_t>(attr_points(attr.get(), file, name)));
  if (!out.empty()) check(H5Aread(attr.get(), memtype, out.data()), file, "read attribute " + name);
  return out;
}

}  // namespace

Handle& Handle::operator=(Handle&& o) noexcept {
  if (this != &o) {
    if (id_ >= 0 && closer_) closer_(id_);
    id_ = o.id_;
    closer_ = o.closer_;
    o.id_ = -1;
  }
  return *this;
}

Handle::~Handle() {
  if (id_ >= 0 && closer_) closer_(id_);
}

void Handle::close(const std::string& file, const std::string& operation) {
  const Id id = id_;
  id_ = -1;
  if (id >= 0 && closer_ && closer_(id) < 0) fail(file, operation);
}

void fail(const std::string& file, const std::string& operation) {
  std::vector<std::string> stack;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, collect_error, &stack);
  H5Eclear2(H5E_DEFAULT);
  std::string detail;
  for (size_t i = 0; i < stack.size() && i < 4; ++i) detail += (i ? "; " : "") + stack[i];
  if (detail.empty()) detail = "no detail on the HDF5 error stack";
  throw CheckpointError(file, operation, "HDF5: " + operation + " failed for " + file + ": " + detail);
}

Handle create_file(const std::filesystem::path& path) {
  quiet_this_thread();
  const std::string f = path.string();
  Handle fapl = file_access_plist(f);
  return Handle(check_id(H5Fcreate(f.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), f, "create file"), H5Fclose);
}

Handle open_file_readonly(const std::filesystem::path& path) {
  quiet_this_thread();
  const std::string f = path.string();
  Handle fapl = file_access_plist(f);
  return Handle(check_id(H5Fopen(f.c_str(), H5F_ACC_RDONLY, fapl.get()), f, "open file"), H5Fclose);
}

Handle open_file_readwrite(const std::filesystem::path& path) {
  quiet_this_thread();
  const std::string f = path.string();
  Handle fapl = file_access_plist(f);
  return Handle(check_id(H5Fopen(f.c_str(), H5F_ACC_RDWR, fapl.get()), f, "open file for writing"), H5Fclose);
}

bool reserve_file_space(Id file, int64_t bytes, const std::string& path) {
  void* handle = nullptr;
  check(H5Fget_vfd_handle(file, H5P_DEFAULT, &handle), path, "get file descriptor");
  const int fd = *static_cast<int*>(handle);
  if (::fallocate(fd, 0, 0, static_cast<off_t>(bytes)) == 0) return true;
  const int err = errno;
  if (err == EOPNOTSUPP || err == ENOSYS) return false;
  if (err == ENOSPC || err == EDQUOT) throw_if_disk_full(path, bytes);
  throw CheckpointError(path, "reserve space",
                        "cannot reserve " + std::to_string(bytes) + " bytes for " + path + ": " + std::strerror(err) +
                            " (free space on the checkpoint file system, or lower checkpoint.keep)");
}

void close_reserved_file(Handle& file, const std::string& path) {
  file.close(path, "close file");
  // The end of allocation as the closed file records it (closing may still release space).
  haddr_t eoa = 0;
  {
    Handle fapl = file_access_plist(path);
    Handle reopened(check_id(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), path, "reopen file"), H5Fclose);
    check(H5Fget_eoa(reopened.get(), &eoa), path, "get end of allocation");
    reopened.close(path, "close file");
  }
  if (::truncate(path.c_str(), static_cast<off_t>(eoa)) != 0) {
    const int err = errno;
    throw CheckpointError(path, "truncate",
                          "truncate " + path + " to " + std::to_string(eoa) + " bytes failed: " + std::strerror(err));
  }
}

Handle create_chunked_f32_dataset(Id loc, const std::string& name, const std::vector<int64_t>& dims,
                                  const std::vector<int64_t>& chunk_dims, const std::string& file) {
  quiet_this_thread();
  Handle space = simple_space(dims, file);
  Handle dcpl(check_id(H5Pcreate(H5P_DATASET_CREATE), file, "create dataset property list"), H5Pclose);
  const std::vector<hsize_t> chunk = to_hsize(chunk_dims);
  check(H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()), file, "set chunk shape");
  check(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER), file, "disable fill");
  check(H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_INCR), file, "set allocation time");
  return Handle(
      check_id(H5Dcreate2(loc, name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT), file,
               "create dataset " + name),
      H5Dclose);
}

void write_f32_chunk(Id dataset, const std::vector<int64_t>& chunk_offset, const float* data, int64_t elements,
                     const std::string& file) {
  quiet_this_thread();
  const std::vector<hsize_t> at = to_hsize(chunk_offset);
  check(H5Dwrite_chunk(dataset, H5P_DEFAULT, 0, at.data(), static_cast<size_t>(elements) * sizeof(float), data), file,
        "write chunk at " + shape_string(chunk_offset));
}

Handle open_dataset(Id loc, const std::string& name, const std::string& file) {
  quiet_this_thread();
  return Handle(check_id(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), file, "open dataset " + name), H5Dclose);
}

std::vector<int64_t> dataset_dims(Id dataset, const std::string& file) {
  quiet_this_thread();
  Handle space(check_id(H5Dget_space(dataset), file, "get dataspace"), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) fail(file, "get dataspace rank");
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  if (rank > 0 && H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0) fail(file, "get dataspace dims");
  return std::vector<int64_t>(dims.begin(), dims.end());
}

RawStorage raw_storage(Id dataset, const std::string& file) {
  quiet_this_thread();
  RawStorage out;
  Handle dcpl(check_id(H5Dget_create_plist(dataset), file, "get dataset creation list"), H5Pclose);
  Handle type(check_id(H5Dget_type(dataset), file, "get dataset type"), H5Tclose);
  if (H5Pget_nfilters(dcpl.get()) != 0 || H5Pget_external_count(dcpl.get()) != 0 ||
      H5Tequal(type.get(), H5T_IEEE_F32LE) <= 0) {
    return out;
  }
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  if (layout == H5D_CHUNKED) {
    std::vector<hsize_t> chunk(H5S_MAX_RANK);
    const int rank = H5Pget_chunk(dcpl.get(), H5S_MAX_RANK, chunk.data());
    if (rank < 1) return out;
    out.kind = RawStorage::chunked;
    out.chunk_dims.assign(chunk.begin(), chunk.begin() + rank);
  } else if (layout == H5D_CONTIGUOUS) {
    Handle space(check_id(H5Dget_space(dataset), file, "get dataspace"), H5Sclose);
    const hssize_t points = H5Sget_simple_extent_npoints(space.get());
    const haddr_t offset = H5Dget_offset(dataset);
    if (points < 0 || offset == HADDR_UNDEF || H5Dget_storage_size(dataset) != static_cast<hsize_t>(points) * 4) {
      return out;
    }
    out.kind = RawStorage::contiguous;
    out.offset = static_cast<int64_t>(offset);
  }
  return out;
}

int64_t chunk_file_offset(Id dataset, const std::vector<int64_t>& chunk_offset, const std::string& file) {
  quiet_this_thread();
  const std::vector<hsize_t> at = to_hsize(chunk_offset);
  unsigned filter_mask = 0;
  haddr_t address = HADDR_UNDEF;
  hsize_t bytes = 0;
  check(H5Dget_chunk_info_by_coord(dataset, at.data(), &filter_mask, &address, &bytes), file,
        "find chunk at " + shape_string(chunk_offset));
  if (address == HADDR_UNDEF) {
    throw FormatError(file, "find chunk",
                      file + ": the chunk at " + shape_string(chunk_offset) +
                          " was never written (a shard cut short); restore it, or load the previous step (fallback)");
  }
  return static_cast<int64_t>(address);
}

void read_f32(Id dataset, const Rect& region, float* dst, const std::vector<int64_t>& dst_dims,
              const std::vector<int64_t>& dst_offset, const std::string& file) {
  quiet_this_thread();
  Handle fspace(check_id(H5Dget_space(dataset), file, "get dataspace"), H5Sclose);
  select_box(fspace.get(), region.offset, region.count, file);
  Handle mspace = simple_space(dst_dims, file);
  select_box(mspace.get(), dst_offset, region.count, file);
  check(H5Dread(dataset, H5T_NATIVE_FLOAT, mspace.get(), fspace.get(), H5P_DEFAULT, dst), file,
        "read " + rect_string(region));
}

Handle create_virtual_f32(Id loc, const std::string& name, const std::vector<int64_t>& dims,
                          const std::vector<VirtualSource>& sources, const std::string& file) {
  quiet_this_thread();
  Handle vspace = simple_space(dims, file);
  Handle dcpl(check_id(H5Pcreate(H5P_DATASET_CREATE), file, "create dataset property list"), H5Pclose);
  for (const VirtualSource& s : sources) {
    Handle map_space = simple_space(dims, file);
    select_box(map_space.get(), s.rect.offset, s.rect.count, file);
    Handle src_space = simple_space(s.rect.count, file);
    check(H5Pset_virtual(dcpl.get(), map_space.get(), s.src_file.c_str(), s.src_dataset.c_str(), src_space.get()), file,
          "map " + s.src_file + ":" + s.src_dataset + " into " + name);
  }
  Handle lcpl(check_id(H5Pcreate(H5P_LINK_CREATE), file, "create link property list"), H5Pclose);
  check(H5Pset_create_intermediate_group(lcpl.get(), 1), file, "allow intermediate groups");
  return Handle(
      check_id(H5Dcreate2(loc, name.c_str(), H5T_IEEE_F32LE, vspace.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT), file,
               "create virtual dataset " + name),
      H5Dclose);
}

// ---- attributes ----

Handle Attrs::open(const std::string& name) const {
  quiet_this_thread();
  return Handle(check_id(H5Aopen(obj_, name.c_str(), H5P_DEFAULT), file_, "open attribute " + name), H5Aclose);
}

bool Attrs::has(const std::string& name) const {
  quiet_this_thread();
  const htri_t rc = H5Aexists(obj_, name.c_str());
  if (rc < 0) fail(file_, "look up attribute " + name);
  return rc > 0;
}

void Attrs::remove(const std::string& name) const {
  if (has(name)) check(H5Adelete(obj_, name.c_str()), file_, "delete attribute " + name);
}

std::vector<std::string> Attrs::names() const {
  quiet_this_thread();
  std::vector<std::string> out;
  auto cb = [](hid_t, const char* n, const H5A_info_t*, void* data) -> herr_t {
    static_cast<std::vector<std::string>*>(data)->emplace_back(n);
    return 0;
  };
  check(H5Aiterate2(obj_, H5_INDEX_NAME, H5_ITER_INC, nullptr, cb, &out), file_, "list attributes");
  return out;
}

void Attrs::set_i64(const std::string& name, int64_t v) const { write_attr(obj_, name, H5T_STD_I64LE, {}, &v, file_); }
void Attrs::set_u64(const std::string& name, uint64_t v) const { write_attr(obj_, name, H5T_STD_U64LE, {}, &v, file_); }
void Attrs::set_f64(const std::string& name, double v) const { write_attr(obj_, name, H5T_IEEE_F64LE, {}, &v, file_); }

void Attrs::set_str(const std::string& name, const std::string& v) const {
  Handle t = vlen_string_type(file_);
  const char* p = v.c_str();
  write_attr(obj_, name, t.get(), {}, &p, file_);
}

void Attrs::set_i64s(const std::string& name, const std::vector<int64_t>& values, std::vector<int64_t> dims) const {
  if (dims.empty()) dims = {static_cast<int64_t>(values.size())};
  write_attr(obj_, name, H5T_STD_I64LE, dims, values.data(), file_);
}

void Attrs::set_u64s(const std::string& name, const std::vector<uint64_t>& values) const {
  write_attr(obj_, name, H5T_STD_U64LE, {static_cast<int64_t>(values.size())}, values.data(), file_);
}

void Attrs::set_u8s(const std::string& name, const std::vector<uint8_t>& values) const {
  write_attr(obj_, name, H5T_STD_U8LE, {static_cast<int64_t>(values.size())}, values.data(), file_);
}

void Attrs::set_strs(const std::string& name, const std::vector<std::string>& values) const {
  Handle t = vlen_string_type(file_);
  std::vector<const char*> ptrs;
  for (const std::string& s : values) ptrs.push_back(s.c_str());
  write_attr(obj_, name, t.get(), {static_cast<int64_t>(values.size())}, ptrs.data(), file_);
}

int64_t Attrs::get_i64(const std::string& name) const {
  const auto v = get_i64s(name);
  if (v.size() != 1)
    throw CheckpointError(
        file_, "read attribute " + name,
        "attribute " + name + " in " + file_ + " has " + std::to_string(v.size()) + " values, expected one");
  return v[0];
}

uint64_t Attrs::get_u64(const std::string& name) const {
  const auto v = get_u64s(name);
  if (v.size() != 1)
    throw CheckpointError(
        file_, "read attribute " + name,
        "attribute " + name + " in " + file_ + " has " + std::to_string(v.size()) + " values, expected one");
  return v[0];
}

double Attrs::get_f64(const std::string& name) const {
  const auto v = read_numeric<double>(open(name), H5T_NATIVE_DOUBLE, file_, name);
  if (v.size() != 1)
    throw CheckpointError(
        file_, "read attribute " + name,
        "attribute " + name + " in " + file_ + " has " + std::to_string(v.size()) + " values, expected one");
  return v[0];
}

std::vector<int64_t> Attrs::get_i64s(const std::string& name) const {
  return read_numeric<int64_t>(open(name), H5T_NATIVE_INT64, file_, name);
}
std::vector<uint64_t> Attrs::get_u64s(const std::string& name) const {
  return read_numeric<uint64_t>(open(name), H5T_NATIVE_UINT64, file_, name);
}
std::vector<uint8_t> Attrs::get_u8s(const std::string& name) const {
  return read_numeric<uint8_t>(open(name), H5T_NATIVE_UINT8, file_, name);
}

std::vector<std::string> Attrs::get_strs(const std::string& name) const {
  Handle attr = open(name);
  const size_t n = static_cast<size_t>(attr_points(attr.get(), file_, name));
  Handle stored(check_id(H5Aget_type(attr.get()), file_, "get type of attribute " + name), H5Tclose);
  if (H5Tget_class(stored.get()) != H5T_STRING) {
    throw CheckpointError(file_, "read attribute " + name, "attribute " + name + " in " + file_ + " is not a string");
  }
  std::vector<std::string> out;
  if (n == 0) return out;
  const htri_t is_vlen = H5Tis_variable_str(stored.get());
  if (is_vlen < 0) fail(file_, "inspect type of attribute " + name);
  if (is_vlen > 0) {
    Handle t = vlen_string_type(file_);
    std::vector<char*> ptrs(n, nullptr);
    check(H5Aread(attr.get(), t.get(), ptrs.data()), file_, "read attribute " + name);
    for (char* p : ptrs) out.emplace_back(p ? p : "");
    Handle space(check_id(H5Aget_space(attr.get()), file_, "get space of attribute " + name), H5Sclose);
    H5Dvlen_reclaim(t.get(), space.get(), H5P_DEFAULT, ptrs.data());
  } else {  // fixed-length strings (e.g. written by other tools)
    const size_t width = H5Tget_size(stored.get());
    std::vector<char> buf(n * width);
    check(H5Aread(attr.get(), stored.get(), buf.data()), file_, "read attribute " + name);
    for (size_t i = 0; i < n; ++i) out.emplace_back(buf.data() + i * width, strnlen(buf.data() + i * width, width));
  }
  return out;
}

std::string Attrs::get_str(const std::string& name) const {
  const auto v = get_strs(name);
  if (v.size() != 1)
    throw CheckpointError(
        file_, "read attribute " + name,
        "attribute " + name + " in " + file_ + " has " + std::to_string(v.size()) + " values, expected one");
  return v[0];
}

}  // namespace axonn::h5

#include "runner/pmix/pmix_util.hpp"

#include <cstring>

#include "runner/pmix/pmix_error.hpp"

namespace axonn::pmix_detail {

pmix_proc_t make_proc(const std::string& nspace, pmix_rank_t rank) {
  pmix_proc_t proc;
  PMIX_PROC_CONSTRUCT(&proc);
  PMIX_LOAD_PROCID(&proc, nspace.c_str(), rank);
  return proc;
}

InfoList::InfoList() : list_(PMIx_Info_list_start()) {
  if (!list_) throw PmixError("PMIx_Info_list_start failed: out of memory");
}

InfoList::~InfoList() {
  if (has_converted_) PMIX_DATA_ARRAY_DESTRUCT(&converted_);
  PMIx_Info_list_release(list_);
}

void InfoList::add(const char* key, const void* value, pmix_data_type_t type, const char* what) {
  pmix_check(PMIx_Info_list_add(list_, key, value, type), std::string("PMIx_Info_list_add(") + key + ", " + what + ")");
  if (has_converted_) {  // a later data() must see the new item
    PMIX_DATA_ARRAY_DESTRUCT(&converted_);
    has_converted_ = false;
  }
}

void InfoList::add_int(const char* key, int value) { add(key, &value, PMIX_INT, "int"); }
void InfoList::add_u32(const char* key, uint32_t value) { add(key, &value, PMIX_UINT32, "uint32"); }
void InfoList::add_u16(const char* key, uint16_t value) { add(key, &value, PMIX_UINT16, "uint16"); }
void InfoList::add_rank(const char* key, pmix_rank_t value) { add(key, &value, PMIX_PROC_RANK, "rank"); }
void InfoList::add_bool(const char* key, bool value) { add(key, &value, PMIX_BOOL, "bool"); }
void InfoList::add_string(const char* key, const std::string& value) { add(key, value.c_str(), PMIX_STRING, "string"); }
void InfoList::add_regex(const char* key, const std::string& regex) { add(key, regex.c_str(), PMIX_REGEX, "regex"); }

void InfoList::add_array(const char* key, const InfoList& items) {
  pmix_data_array_t array;
  PMIX_DATA_ARRAY_CONSTRUCT(&array, 0, PMIX_INFO);
  pmix_check(PMIx_Info_list_convert(items.list_, &array), std::string("PMIx_Info_list_convert(") + key + ")");
  try {
    add(key, &array, PMIX_DATA_ARRAY, "array");  // copies the array
  } catch (...) {
    PMIX_DATA_ARRAY_DESTRUCT(&array);
    throw;
  }
  PMIX_DATA_ARRAY_DESTRUCT(&array);
}

pmix_info_t* InfoList::data() {
  if (!has_converted_) {
    PMIX_DATA_ARRAY_CONSTRUCT(&converted_, 0, PMIX_INFO);
    pmix_check(PMIx_Info_list_convert(list_, &converted_), "PMIx_Info_list_convert");
    has_converted_ = true;
  }
  return static_cast<pmix_info_t*>(converted_.array);
}

size_t InfoList::size() {
  data();
  return converted_.size;
}

void OpCompletion::callback(pmix_status_t status, void* self) {
  auto* c = static_cast<OpCompletion*>(self);
  std::lock_guard lock(c->mu_);
  c->status_ = status;
  c->done_ = true;
  c->cv_.notify_all();
}

pmix_status_t OpCompletion::wait() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  return status_;
}

}  // namespace axonn::pmix_detail

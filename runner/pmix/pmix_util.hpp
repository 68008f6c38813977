#pragma once
// Internal helpers over the PMIx C API shared by the client and the server (not installed:
// it includes pmix.h, which the public headers keep out of users' translation units).
#include <pmix.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

namespace axonn::pmix_detail {

// A process name; `nspace` is truncated to PMIX_MAX_NSLEN like every PMIx name.
pmix_proc_t make_proc(const std::string& nspace, pmix_rank_t rank);

// Builds a pmix_info_t array with PMIx's own list (PMIx_Info_list_*), which copies every
// value it is given, so callers may pass temporaries. Nested arrays (PMIX_PROC_DATA,
// PMIX_NODE_INFO_ARRAY) are other InfoLists added with add_array.
class InfoList {
 public:
  InfoList();
  ~InfoList();
  InfoList(const InfoList&) = delete;
  InfoList& operator=(const InfoList&) = delete;

  void add_int(const char* key, int value);
  void add_u32(const char* key, uint32_t value);
  void add_u16(const char* key, uint16_t value);
  void add_rank(const char* key, pmix_rank_t value);
  void add_bool(const char* key, bool value);
  void add_string(const char* key, const std::string& value);
  void add_regex(const char* key, const std::string& regex);  // a PMIx_generate_* result
  void add_array(const char* key, const InfoList& items);

  // The array, owned by this list until it is destroyed.
  pmix_info_t* data();
  size_t size();

 private:
  void add(const char* key, const void* value, pmix_data_type_t type, const char* what);
  void* list_ = nullptr;
  pmix_data_array_t converted_{};
  bool has_converted_ = false;
};

// Waits on the calling thread for a PMIx operation callback (pmix_op_cbfunc_t) that runs
// on PMIx's progress thread.
class OpCompletion {
 public:
  static void callback(pmix_status_t status, void* self);
  pmix_status_t wait();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  pmix_status_t status_ = PMIX_SUCCESS;
};

}  // namespace axonn::pmix_detail

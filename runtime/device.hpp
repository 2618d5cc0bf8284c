// Small RAII helpers over the driver table for tools and tests: the primary context,
// device buffers and events. Not part of the public API.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <mutex>
#include <string>

#include "cache/cache.hpp"
#include "generator/plan.hpp"
#include "runtime/driver.hpp"

namespace normjit::device {

// The target of `device`, its multiprocessor count included: what an engine there plans for.
inline Target target_of(CUdevice device) {
  const driver::Api& cu = driver::api();
  int major = 0, minor = 0;
  Target t;
  NORMJIT_CU(cu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device));
  NORMJIT_CU(cu.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device));
  NORMJIT_CU(
      cu.cuDeviceGetAttribute(&t.sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device));
  t.sm = major * 10 + minor;
  // Peak DRAM bandwidth: two transfers a memory clock (kHz) over the bus (bits). A device that
  // reports neither gets the arch's full-size part's, as an offline plan does.
  int clock_khz = 0, bus_bits = 0;
  NORMJIT_CU(cu.cuDeviceGetAttribute(&clock_khz, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, device));
  NORMJIT_CU(
      cu.cuDeviceGetAttribute(&bus_bits, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, device));
  const long long gbps = 2LL * clock_khz * bus_bits / 8 / 1'000'000;
  t.dram_gbps = gbps > 0 && gbps <= Target::kMaxDramGbps ? int(gbps) : arch_facts(t.sm).dram_gbps;
  return t;
}

// NORMJIT_DRAM_GBPS: the peak DRAM bandwidth (GB/s, 1 to Target::kMaxDramGbps) that engines whose
// options leave dram_gbps at 0, and `normjit dump` without --arch, plan for instead of the GPU's
// (a deployment running kernels prewarmed for another part's bandwidth). Unset, empty or 0: the
// GPU's. Any other value is ignored with one warning per process naming it.
inline int dram_gbps_from_env() {
  const char* value = std::getenv("NORMJIT_DRAM_GBPS");
  if (value == nullptr || *value == '\0') return 0;
  char* end = nullptr;
  errno = 0;
  const long long gbps = std::strtoll(value, &end, 10);
  if (errno == 0 && *end == '\0' && end != value && gbps >= 0 && gbps <= Target::kMaxDramGbps) {
    return int(gbps);
  }
  static std::once_flag warned;
  std::call_once(warned, [&] {
    cache::warn("NORMJIT_DRAM_GBPS='" + std::string(value).substr(0, 64) +
                "' is not a DRAM bandwidth in GB/s from 1 to " +
                std::to_string(Target::kMaxDramGbps) + " (or 0); planning for the GPU's");
  });
  return 0;
}

// Makes the primary context of `ordinal` current on this thread for its lifetime.
class PrimaryContext {
 public:
  explicit PrimaryContext(int ordinal = 0) {
    const driver::Api& cu = driver::api();
    NORMJIT_CU(cu.cuDeviceGet(&device_, ordinal));
    NORMJIT_CU(cu.cuDevicePrimaryCtxRetain(&context_, device_));
    NORMJIT_CU(cu.cuCtxSetCurrent(context_));
  }
  ~PrimaryContext() { driver::api().cuDevicePrimaryCtxRelease(device_); }
  PrimaryContext(const PrimaryContext&) = delete;
  PrimaryContext& operator=(const PrimaryContext&) = delete;
  CUdevice device() const { return device_; }
  std::string name() const {
    char name[256] = {};
    driver::api().cuDeviceGetName(name, sizeof(name), device_);
    return name;
  }
  int attribute(CUdevice_attribute a) const {
    int v = 0;
    NORMJIT_CU(driver::api().cuDeviceGetAttribute(&v, a, device_));
    return v;
  }

 private:
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
};

class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t bytes) : bytes_(bytes) {
    if (bytes) NORMJIT_CU(driver::api().cuMemAlloc(&ptr_, bytes));
  }
  ~Buffer() {
    if (ptr_) driver::api().cuMemFree(ptr_);
  }
  Buffer(Buffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = 0; }
  Buffer& operator=(Buffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  void* get() const { return reinterpret_cast<void*>(ptr_); }
  CUdeviceptr ptr() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  // upload and fill_bytes return once the device memory holds the bytes. The driver's
  // "synchronous" copy from pageable memory and memset may still be running on the legacy
  // stream when they return, and a stream created CU_STREAM_NON_BLOCKING (Stream below) is not
  // ordered after it: a kernel launched there next could read the old x or have its y
  // overwritten by the fill (seen on the H100 as poisoned outputs of graph replays when another
  // process shared the GPU and slowed the memset). Tools and tests only, never a launch path.
  void upload(const void* host, size_t bytes, size_t offset = 0) {
    NORMJIT_CU(driver::api().cuMemcpyHtoD(ptr_ + offset, host, bytes));
    NORMJIT_CU(driver::api().cuCtxSynchronize());
  }
  void download(void* host, size_t bytes, size_t offset = 0) const {
    NORMJIT_CU(driver::api().cuMemcpyDtoH(host, ptr_ + offset, bytes));
  }
  void fill_bytes(unsigned char value) {
    NORMJIT_CU(driver::api().cuMemsetD8(ptr_, value, bytes_));
    NORMJIT_CU(driver::api().cuCtxSynchronize());
  }

 private:
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

// A stream of its own (non-blocking: no implicit ordering with the legacy default stream).
class Stream {
 public:
  Stream() { NORMJIT_CU(driver::api().cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING)); }
  ~Stream() { driver::api().cuStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  CUstream get() const { return stream_; }
  CUstream_st* handle() const { return stream_; }
  void synchronize() const { NORMJIT_CU(driver::api().cuStreamSynchronize(stream_)); }

 private:
  CUstream stream_ = nullptr;
};

class Event {
 public:
  Event() { NORMJIT_CU(driver::api().cuEventCreate(&event_, CU_EVENT_DEFAULT)); }
  ~Event() { driver::api().cuEventDestroy(event_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(CUstream stream = nullptr) {
    NORMJIT_CU(driver::api().cuEventRecord(event_, stream));
  }
  // Milliseconds from start to this event (synchronizes on this event).
  float since(const Event& start) const {
    NORMJIT_CU(driver::api().cuEventSynchronize(event_));
    float ms = 0;
    NORMJIT_CU(driver::api().cuEventElapsedTime(&ms, start.event_, event_));
    return ms;
  }

 private:
  CUevent event_ = nullptr;
};

}  // namespace normjit::device

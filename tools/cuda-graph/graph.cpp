// The CUDA graph shim of `ledger` (issue 78; src/train/lm/graph.rs): a C ABI over
// at::cuda::CUDAGraph, loaded at run time with dlopen, so the CPU build takes no CUDA
// dependency. Built on the GPU machine against its own torch by tools/cuda-graph.sh.
//
// A capture runs on a side stream from torch's pool (capturing the default stream is
// refused by CUDA), which is made the current stream between begin and end so that
// every op libtorch launches meanwhile lands in the graph; the previous stream comes
// back at the end, on success or failure. A replay launches on the current stream, in
// order with everything else the process queues there.
//
// Every call catches what libtorch throws and copies its message into `err` (at most
// `len` bytes, NUL-terminated); nothing crosses the C boundary as an exception.
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

#include <cstddef>
#include <cstring>
#include <exception>
#include <optional>

namespace {

struct Graph {
  at::cuda::CUDAGraph graph;
  std::optional<c10::cuda::CUDAStream> previous;
};

void say(char* err, std::size_t len, const char* what) {
  if (err != nullptr && len > 0) {
    std::strncpy(err, what, len - 1);
    err[len - 1] = '\0';
  }
}

}  // namespace

extern "C" {

// The ABI version src/train/lm/graph.rs checks before it calls anything else.
int mapf_graph_abi() { return 1; }

// Begin capturing on `device`; returns the graph, or null with the reason in `err`.
void* mapf_graph_capture_begin(int device, char* err, std::size_t len) {
  Graph* g = nullptr;
  try {
    const auto index = static_cast<c10::DeviceIndex>(device);
    c10::cuda::device_synchronize();
    g = new Graph();
    g->previous = c10::cuda::getCurrentCUDAStream(index);
    c10::cuda::setCurrentCUDAStream(c10::cuda::getStreamFromPool(false, index));
    g->graph.capture_begin();
    return g;
  } catch (const std::exception& e) {
    say(err, len, e.what());
  } catch (...) {
    say(err, len, "unknown C++ exception in capture_begin");
  }
  if (g != nullptr) {
    if (g->previous) c10::cuda::setCurrentCUDAStream(*g->previous);
    delete g;
  }
  return nullptr;
}

// End the capture and instantiate the graph: 0, or 1 with the reason in `err` (the
// graph is then unusable; free it).
int mapf_graph_capture_end(void* handle, char* err, std::size_t len) {
  auto* g = static_cast<Graph*>(handle);
  int rc = 0;
  try {
    g->graph.capture_end();
  } catch (const std::exception& e) {
    say(err, len, e.what());
    rc = 1;
  } catch (...) {
    say(err, len, "unknown C++ exception in capture_end");
    rc = 1;
  }
  if (g->previous) c10::cuda::setCurrentCUDAStream(*g->previous);
  return rc;
}

// Launch the captured work once on the current stream: 0, or 1 with the reason.
int mapf_graph_replay(void* handle, char* err, std::size_t len) {
  try {
    static_cast<Graph*>(handle)->graph.replay();
    return 0;
  } catch (const std::exception& e) {
    say(err, len, e.what());
  } catch (...) {
    say(err, len, "unknown C++ exception in replay");
  }
  return 1;
}

void mapf_graph_free(void* handle) { delete static_cast<Graph*>(handle); }

}  // extern "C"

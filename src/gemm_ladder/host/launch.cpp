// gemm-ladder's compiled host path: the CUDA kernels of gemm_ladder::mm and gemm_ladder::linear, of the planned ops
// (gemm_ladder::swiglu and the grouped ops, below), and scaled_mm's eager entry (the fp8 kernel; called from
// gemm_ladder.scaled_mm, not registered as a kernel).
//
// A call's route is decided once per signature (shapes, strides, dtypes, each base address's
// residue mod 16, the epilogue's identity, out_dtype, device, whether the stream is capturing) by a
// Python planner (gemm_ladder/host/__init__.py, registered at load). It answers with a launch
// template (the packed kernel arguments of the library's own bind, with the places where addresses
// and alpha/beta go) or with None: that signature then runs the Python path on every call. Per call
// this file only builds the key, allocates the output, copies the argument buffer, encodes the tensor
// maps for the call's addresses (cuTensorMapEncodeTiled), writes pointers and scalars, takes split
// workspace and calls cuLaunchKernelEx on the current stream. libcuda is opened with dlopen: nothing
// here links against it, so the module builds and loads on a machine without a GPU.
#include <torch/csrc/Exceptions.h>
#include <torch/extension.h>
#include <torch/library.h>

#include <dlfcn.h>

#include <atomic>
#include <functional>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#ifdef GL_HOST_C10_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#else
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#endif

namespace py = pybind11;

namespace gl_host {

// --- the driver, opened at first use --------------------------------------------------------------

// cuda.h's CUlaunchAttribute (an id, padding, a 64-byte value union) and CUlaunchConfig (CUDA 12+).
struct LaunchAttr {
  int id;
  int pad;
  unsigned x, y, z;
  char rest[52];
};
struct LaunchConfig {
  unsigned gx, gy, gz, bx, by, bz, smem;
  void* stream;
  LaunchAttr* attrs;
  unsigned nattrs;
};
static_assert(sizeof(LaunchAttr) == 72, "CUlaunchAttribute is 72 bytes");

struct Driver {
  bool tried = false;
  std::string error;
  int (*launch)(const LaunchConfig*, void*, void**, void**) = nullptr;
  int (*encode)(void*, int, unsigned, void*, const uint64_t*, const uint64_t*, const uint32_t*, const uint32_t*,
                int, int, int, int) = nullptr;
  int (*capturing)(void*, int*) = nullptr;
  int (*memset32)(uint64_t, unsigned, size_t, void*) = nullptr;
  int (*alloc_async)(uint64_t*, size_t, void*) = nullptr;
  int (*free_async)(uint64_t, void*) = nullptr;
  int (*error_string)(int, const char**) = nullptr;
  int (*ctx_get_current)(void**) = nullptr;
  int (*ctx_set_current)(void*) = nullptr;
  int (*device_get)(int*, int) = nullptr;
  int (*primary_ctx_retain)(void**, int) = nullptr;
};

static Driver& driver() {
  static Driver d;
  static std::once_flag once;
  std::call_once(once, [] {
    d.tried = true;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (lib == nullptr) {
      d.error = "libcuda.so.1 could not be opened (no NVIDIA driver)";
      return;
    }
    auto sym = [&](const char* name) -> void* {
      void* p = dlsym(lib, name);
      if (p == nullptr && d.error.empty()) d.error = std::string("libcuda has no ") + name;
      return p;
    };
    d.launch = reinterpret_cast<decltype(d.launch)>(sym("cuLaunchKernelEx"));
    d.encode = reinterpret_cast<decltype(d.encode)>(sym("cuTensorMapEncodeTiled"));
    d.capturing = reinterpret_cast<decltype(d.capturing)>(sym("cuStreamIsCapturing"));
    d.memset32 = reinterpret_cast<decltype(d.memset32)>(sym("cuMemsetD32Async"));
    d.alloc_async = reinterpret_cast<decltype(d.alloc_async)>(sym("cuMemAllocAsync"));
    d.free_async = reinterpret_cast<decltype(d.free_async)>(sym("cuMemFreeAsync"));
    d.error_string = reinterpret_cast<decltype(d.error_string)>(sym("cuGetErrorString"));
    d.ctx_get_current = reinterpret_cast<decltype(d.ctx_get_current)>(sym("cuCtxGetCurrent"));
    d.ctx_set_current = reinterpret_cast<decltype(d.ctx_set_current)>(sym("cuCtxSetCurrent"));
    d.device_get = reinterpret_cast<decltype(d.device_get)>(sym("cuDeviceGet"));
    d.primary_ctx_retain = reinterpret_cast<decltype(d.primary_ctx_retain)>(sym("cuDevicePrimaryCtxRetain"));
  });
  TORCH_CHECK(d.error.empty(), "gemm_ladder host: ", d.error);
  return d;
}

static void check(int err, const char* what) {
  if (err == 0) return;
  const char* text = nullptr;
  if (driver().error_string != nullptr) driver().error_string(err, &text);
  TORCH_CHECK(false, "gemm_ladder host: ", what, " failed: CUDA error ", err, " (", text ? text : "?", ")");
}

static void* current_stream(const at::Device& device) {
#ifdef GL_HOST_C10_CUDA
  return c10::cuda::getCurrentCUDAStream(device.index()).stream();
#else
  return c10::impl::getDeviceGuardImpl(device.type())->getStream(device).native_handle();
#endif
}

// Makes the tensors' device current for the call (its primary context, so that the planner's loads,
// the workspace's allocations and the launch happen there) and restores the caller's on return. A
// custom op's CUDA kernel gets no device guard from the dispatcher (only native functions do).
#ifdef GL_HOST_C10_CUDA
using DeviceGuard = c10::cuda::CUDAGuard;
#else
using DeviceGuard = c10::DeviceGuard;
#endif

// Makes the device's primary context current on this thread when none is. The driver calls below act on
// the thread's current context, and a thread that has not yet called the CUDA runtime has none: c10's
// device guard calls cudaSetDevice only when the device changes (so that no context is created on device
// 0 by accident), and cudaGetDevice makes none current. Such a thread (the autograd engine's device
// thread running a backward, any Python thread) crashed in cuStreamIsCapturing / cuLaunchKernelEx
// (bench/results/logs/2026-12-04_device_host_thread_segfault_smallm_fp8_be836b8.log: every call from a new thread). The
// primary context is torch's own (retained by it already); the retain here is never released, like the
// arenas below.
static void ensure_context(int device) {
  Driver& d = driver();
  void* ctx = nullptr;
  check(d.ctx_get_current(&ctx), "cuCtxGetCurrent");
  if (ctx != nullptr) return;
  int dev = 0;
  check(d.device_get(&dev, device), "cuDeviceGet");
  check(d.primary_ctx_retain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(d.ctx_set_current(ctx), "cuCtxSetCurrent");
}

static bool stream_capturing(void* stream) {
  int status = 0;
  check(driver().capturing(stream, &status), "cuStreamIsCapturing");
  return status != 0;  // active or invalidated: either way a capture is under way
}

// What every op kernel below opens with: the tensors' device current (and its primary context), its current
// stream, and whether a capture is under way on it. The guard restores the caller's device when the call returns.
struct CallScope {
  DeviceGuard guard;
  void* stream;
  bool capturing;
  explicit CallScope(const at::Device& device) : guard(device) {
    ensure_context(device.index());
    stream = current_stream(device);
    capturing = stream_capturing(stream);
  }
};

// --- launch templates ------------------------------------------------------------------------------

// Where an address comes from: the op's arguments, in this order.
enum Source { kA = 0, kB = 1, kOut = 2, kBias = 3, kResidual = 4, kScaleA = 5, kScaleB = 6, kScaleAPadded = 7,
              kOffs = 8, kWUp = 9, kSources = 10 };

struct MapPatch {
  int64_t offset;
  int source;
  int dtype;
  unsigned rank;
  uint64_t dims[5];
  uint64_t strides[4];
  uint32_t box[5];
  uint32_t element_strides[5];
  int interleave, swizzle, l2, oob;
};

struct Patch {
  int64_t offset;
  int source;  // a tensor (Source) for pointers; 0 alpha / 1 beta for scalars
};

struct Template {
  bool python = true;  // run the Python path for this signature
  void* function = nullptr;
  unsigned grid[3] = {1, 1, 1};
  unsigned threads = 0, smem = 0, cluster = 1;
  int cluster_attr = 4;  // CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
  std::vector<uint8_t> buffer;
  std::vector<int64_t> arg_offsets;
  std::vector<MapPatch> maps;
  std::vector<Patch> pointers, scalars;
  int64_t partials_offset = -1, partial_floats = 0;
  int64_t counters_offset = -1, counters = 0;
  std::vector<int64_t> out_shape;
  at::ScalarType out_dtype = at::kBFloat16;
  int64_t pad_rows = 0, pad_pitch = 0;  // scaled_mm: blockwise scale_a copied into a (rows, pitch) buffer
  std::string describe;
};

constexpr size_t kMaxBuffer = 4096;

static Template parse_template(const py::handle& t) {
  Template out;
  if (t.is_none()) return out;
  out.python = false;
  out.function = reinterpret_cast<void*>(t.attr("function").cast<uintptr_t>());
  auto grid = t.attr("grid").cast<std::vector<unsigned>>();
  TORCH_CHECK(grid.size() == 3, "gemm_ladder host: a template's grid has 3 dimensions");
  std::copy(grid.begin(), grid.end(), out.grid);
  out.threads = t.attr("threads").cast<unsigned>();
  out.smem = t.attr("dynamic_smem").cast<unsigned>();
  out.cluster = t.attr("cluster").cast<unsigned>();
  out.cluster_attr = t.attr("cluster_attr").cast<int>();
  std::string bytes = t.attr("buffer").cast<std::string>();
  TORCH_CHECK(bytes.size() <= kMaxBuffer, "gemm_ladder host: kernel arguments of ", bytes.size(), " bytes");
  out.buffer.assign(bytes.begin(), bytes.end());
  out.arg_offsets = t.attr("arg_offsets").cast<std::vector<int64_t>>();
  for (auto m : t.attr("maps")) {
    auto tup = m.cast<py::tuple>();
    MapPatch p{};
    p.offset = tup[0].cast<int64_t>();
    p.source = tup[1].cast<int>();
    p.dtype = tup[2].cast<int>();
    p.rank = tup[3].cast<unsigned>();
    auto dims = tup[4].cast<std::vector<uint64_t>>();
    auto strides = tup[5].cast<std::vector<uint64_t>>();
    auto box = tup[6].cast<std::vector<uint32_t>>();
    auto es = tup[7].cast<std::vector<uint32_t>>();
    TORCH_CHECK(p.rank >= 1 && p.rank <= 5 && dims.size() == p.rank && strides.size() == p.rank - 1 &&
                    box.size() == p.rank && es.size() == p.rank,
                "gemm_ladder host: a tensor map's extents disagree with its rank");
    std::copy(dims.begin(), dims.end(), p.dims);
    std::copy(strides.begin(), strides.end(), p.strides);
    std::copy(box.begin(), box.end(), p.box);
    std::copy(es.begin(), es.end(), p.element_strides);
    p.interleave = tup[8].cast<int>();
    p.swizzle = tup[9].cast<int>();
    p.l2 = tup[10].cast<int>();
    p.oob = tup[11].cast<int>();
    out.maps.push_back(p);
  }
  for (auto q : t.attr("pointers")) {
    auto tup = q.cast<py::tuple>();
    out.pointers.push_back({tup[0].cast<int64_t>(), tup[1].cast<int>()});
  }
  for (auto q : t.attr("scalars")) {
    auto tup = q.cast<py::tuple>();
    out.scalars.push_back({tup[0].cast<int64_t>(), tup[1].cast<int>()});
  }
  py::object part = t.attr("partials"), ctr = t.attr("counters");
  if (!part.is_none()) {
    auto tup = part.cast<py::tuple>();
    out.partials_offset = tup[0].cast<int64_t>();
    out.partial_floats = tup[1].cast<int64_t>();
  }
  if (!ctr.is_none()) {
    auto tup = ctr.cast<py::tuple>();
    out.counters_offset = tup[0].cast<int64_t>();
    out.counters = tup[1].cast<int64_t>();
  }
  out.out_shape = t.attr("out_shape").cast<std::vector<int64_t>>();
  out.out_dtype = torch::python::detail::py_object_to_dtype(t.attr("out_dtype"));
  if (py::hasattr(t, "pad_scale_a") && !t.attr("pad_scale_a").is_none()) {
    auto pad = t.attr("pad_scale_a").cast<py::tuple>();
    out.pad_rows = pad[0].cast<int64_t>();
    out.pad_pitch = pad[1].cast<int64_t>();
  }
  return out;
}

// --- split workspaces: per (device, stream), from the driver's stream-ordered allocator ----------

// Never from torch's caching allocator: inside a CUDA-graph tree's warm-up run that would hand out
// memory of the graph's pool, which this cache would then keep alive untracked. A capture runs
// unsplit (its templates have no workspace), so nothing is allocated or memset while capturing.
constexpr int64_t kCounterArena = 1 << 18;

struct Arena {
  uint64_t partials = 0;
  int64_t partial_floats = 0;
  uint64_t counters = 0;
  int64_t capacity = 0, next = 0;
};

static std::mutex arena_lock;
static std::unordered_map<uint64_t, Arena>& arenas() {
  static auto* a = new std::unordered_map<uint64_t, Arena>();  // never destroyed: the driver may be gone at exit
  return *a;
}

static void take_workspace(int device, void* stream, int64_t floats, int64_t counters, uint64_t* partials,
                           uint64_t* counter_base) {
  Driver& d = driver();
  std::lock_guard<std::mutex> guard(arena_lock);
  Arena& a = arenas()[(reinterpret_cast<uint64_t>(stream) << 8) ^ static_cast<uint64_t>(device)];
  if (floats > a.partial_floats) {
    if (a.partials) check(d.free_async(a.partials, stream), "cuMemFreeAsync");
    check(d.alloc_async(&a.partials, static_cast<size_t>(floats) * 4, stream), "cuMemAllocAsync");
    a.partial_floats = floats;
  }
  if (counters > a.capacity) {
    if (a.counters) check(d.free_async(a.counters, stream), "cuMemFreeAsync");
    int64_t cap = std::max(kCounterArena, counters);
    check(d.alloc_async(&a.counters, static_cast<size_t>(cap) * 4, stream), "cuMemAllocAsync");
    a.capacity = cap;
    a.next = cap;  // cleared before its first use, below
  }
  if (a.next + counters > a.capacity) {  // cleared on the stream, after every launch that used it
    check(d.memset32(a.counters, 0, static_cast<size_t>(a.capacity), stream), "cuMemsetD32Async");
    a.next = 0;
  }
  *partials = a.partials;
  *counter_base = a.counters + 4 * static_cast<uint64_t>(a.next);
  a.next += counters;
}

// Writes a template's per-call values into ``buf`` (a copy of its buffer): maps (unless
// ``encode_maps`` is false: the CPU test), pointers, scalars. Split workspace is the caller's.
static void patch(const Template& t, uint8_t* buf, const uint64_t* ptrs, float alpha, float beta, bool encode_maps) {
  for (const MapPatch& m : t.maps) {
    if (!encode_maps) continue;
    check(driver().encode(buf + m.offset, m.dtype, m.rank, reinterpret_cast<void*>(ptrs[m.source]), m.dims,
                          m.strides, m.box, m.element_strides, m.interleave, m.swizzle, m.l2, m.oob),
          "cuTensorMapEncodeTiled");
  }
  for (const Patch& p : t.pointers) std::memcpy(buf + p.offset, &ptrs[p.source], 8);
  for (const Patch& p : t.scalars) {
    float v = p.source == 0 ? alpha : beta;
    std::memcpy(buf + p.offset, &v, 4);
  }
}

// Launches made from C++ (tests read it: a CUDA-graph replay makes none).
static std::atomic<int64_t> launch_count{0};

static void launch(const Template& t, const uint64_t* ptrs, float alpha, float beta, int device, void* stream) {
  alignas(64) uint8_t buf[kMaxBuffer];
  std::memcpy(buf, t.buffer.data(), t.buffer.size());
  patch(t, buf, ptrs, alpha, beta, true);
  if (t.partials_offset >= 0 || t.counters_offset >= 0) {
    uint64_t partials = 0, counters = 0;
    take_workspace(device, stream, t.partial_floats, t.counters, &partials, &counters);
    if (t.partials_offset >= 0) std::memcpy(buf + t.partials_offset, &partials, 8);
    if (t.counters_offset >= 0) std::memcpy(buf + t.counters_offset, &counters, 8);
  }
  void* params[64];
  TORCH_CHECK(t.arg_offsets.size() <= 64, "gemm_ladder host: more than 64 kernel arguments");
  for (size_t i = 0; i < t.arg_offsets.size(); ++i) params[i] = buf + t.arg_offsets[i];
  LaunchAttr attr{};
  LaunchConfig cfg{t.grid[0], t.grid[1], t.grid[2], t.threads, 1, 1, t.smem, stream, nullptr, 0};
  if (t.cluster > 1) {
    attr.id = t.cluster_attr;
    attr.x = t.cluster;
    attr.y = attr.z = 1;
    cfg.attrs = &attr;
    cfg.nattrs = 1;
  }
  check(driver().launch(&cfg, t.function, params, nullptr), "cuLaunchKernelEx");
  launch_count.fetch_add(1, std::memory_order_relaxed);
}

// --- signatures ------------------------------------------------------------------------------------

enum Op : int64_t { kMm = 1, kLinear = 2, kScaledMm = 3 };

static void push_tensor(std::vector<int64_t>& k, const at::Tensor& t) {
  k.push_back(t.dim());
  for (int64_t s : t.sizes()) k.push_back(s);
  for (int64_t s : t.strides()) k.push_back(s);
  k.push_back(static_cast<int64_t>(t.scalar_type()));
  k.push_back(t.device().index());
  k.push_back(static_cast<int64_t>(reinterpret_cast<uintptr_t>(t.data_ptr()) & 15));
}

static void push_optional(std::vector<int64_t>& k, const std::optional<at::Tensor>& t) {
  if (t.has_value() && t->defined()) {
    k.push_back(1);
    push_tensor(k, *t);
  } else {
    k.push_back(0);
  }
}

static int64_t dtype_code(std::optional<at::ScalarType> d) { return d.has_value() ? static_cast<int64_t>(*d) : -1; }

// The keys are built into a caller's vector (per call: a thread-local one, cleared, so no allocation).
static void mm_key(std::vector<int64_t>& k, const at::Tensor& a, const at::Tensor& b,
                   std::optional<at::ScalarType> out_dtype, bool capturing) {
  k.clear();
  k.push_back(kMm);
  k.push_back(capturing);
  k.push_back(dtype_code(out_dtype));
  push_tensor(k, a);
  push_tensor(k, b);
}

// linear's activations get their own numbers; any other string a number past them (the planner
// refuses it, so no template is ever kept under it).
static int64_t activation_id(const std::optional<c10::string_view>& activation) {
  if (!activation.has_value()) return -1;
  std::string_view a(activation->data(), activation->size());
  static const char* known[] = {"relu", "gelu", "gelu_tanh", "silu"};
  for (int64_t i = 0; i < 4; ++i) {
    if (a == known[i]) return i;
  }
  return 4 + static_cast<int64_t>(std::hash<std::string_view>{}(a) >> 2);
}

static void linear_key(std::vector<int64_t>& k, const at::Tensor& x, const at::Tensor& w,
                       const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& residual,
                       std::optional<c10::string_view> activation, double alpha, double beta,
                       std::optional<at::ScalarType> out_dtype, bool capturing) {
  k.clear();
  k.push_back(kLinear);
  k.push_back(capturing);
  k.push_back(dtype_code(out_dtype));
  push_tensor(k, x);
  push_tensor(k, w);
  push_optional(k, bias);
  push_optional(k, residual);
  // The epilogue's identity: the activation (by name), alpha != 1 (a multiply), beta == 0 (the
  // residual is not read); their values are written per call.
  k.push_back(activation_id(activation));
  k.push_back(alpha != 1.0);
  k.push_back(beta == 0.0);
}

// scaled_mm's key also holds ``settings``: a number for the fp8 module's defaults (library/fp8.py
// settings()), so that a default changed between calls is planned anew.
static void scaled_mm_key(std::vector<int64_t>& k, const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a,
                          const at::Tensor& scale_b, const std::optional<at::Tensor>& bias, at::ScalarType out_dtype,
                          int64_t settings, bool capturing) {
  k.clear();
  k.push_back(kScaledMm);
  k.push_back(capturing);
  k.push_back(static_cast<int64_t>(out_dtype));
  k.push_back(settings);
  push_tensor(k, a);
  push_tensor(k, b);
  push_tensor(k, scale_a);
  push_tensor(k, scale_b);
  push_optional(k, bias);
}

struct KeyHash {
  size_t operator()(const std::vector<int64_t>& k) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t v : k) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

// --- the planner and the Python path (registered from Python) ------------------------------------

struct Callbacks {
  py::object plan_mm, plan_linear, run_mm, run_linear, plan_scaled_mm, run_scaled_mm;
};
static Callbacks* callbacks = nullptr;  // never destroyed: Python may be finalised first

static std::mutex cache_lock;
static std::unordered_map<std::vector<int64_t>, std::shared_ptr<const Template>, KeyHash>& cache() {
  static auto* c = new std::unordered_map<std::vector<int64_t>, std::shared_ptr<const Template>, KeyHash>();
  return *c;
}
static int64_t planner_calls = 0;
constexpr size_t kCacheSize = 4096;

static std::shared_ptr<const Template> find(const std::vector<int64_t>& key) {
  std::lock_guard<std::mutex> guard(cache_lock);
  auto it = cache().find(key);
  return it == cache().end() ? nullptr : it->second;
}

static std::shared_ptr<const Template> keep(const std::vector<int64_t>& key, Template t) {
  auto p = std::make_shared<const Template>(std::move(t));
  std::lock_guard<std::mutex> guard(cache_lock);
  if (cache().size() >= kCacheSize) cache().clear();
  cache()[key] = p;
  ++planner_calls;
  return p;
}

static void require_callbacks() {
  TORCH_CHECK(callbacks != nullptr, "gemm_ladder host: the Python planner is not registered (import gemm_ladder.ops)");
}

// --- the ops' CUDA kernels ------------------------------------------------------------------------

at::Tensor mm_cuda(const at::Tensor& a, const at::Tensor& b, std::optional<at::ScalarType> out_dtype) {
  CallScope scope(a.device());
  thread_local std::vector<int64_t> key;
  mm_key(key, a, b, out_dtype, scope.capturing);
  auto t = find(key);
  if (t == nullptr) {
    require_callbacks();
    py::gil_scoped_acquire gil;
    std::vector<int64_t> owned(key);  // the planner may re-enter an op on this thread (the key is thread-local)
    t = keep(owned, parse_template(callbacks->plan_mm(a, b, out_dtype)));  // raises the library's errors
  }
  if (t->python) {
    require_callbacks();
    py::gil_scoped_acquire gil;
    return callbacks->run_mm(a, b, out_dtype).cast<at::Tensor>();
  }
  at::Tensor out = at::empty(t->out_shape, a.options().dtype(t->out_dtype));
  uint64_t ptrs[kSources] = {reinterpret_cast<uint64_t>(a.data_ptr()), reinterpret_cast<uint64_t>(b.data_ptr()),
                             reinterpret_cast<uint64_t>(out.data_ptr()), 0, 0};
  launch(*t, ptrs, 1.0f, 1.0f, a.device().index(), scope.stream);
  return out;
}

at::Tensor linear_cuda(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& bias,
                       const std::optional<at::Tensor>& residual, std::optional<c10::string_view> activation,
                       double alpha, double beta, std::optional<at::ScalarType> out_dtype) {
  CallScope scope(x.device());
  thread_local std::vector<int64_t> key;
  linear_key(key, x, w, bias, residual, activation, alpha, beta, out_dtype, scope.capturing);
  auto t = find(key);
  auto py_activation = [&]() -> py::object {
    if (!activation.has_value()) return py::none();
    return py::str(std::string(activation->data(), activation->size()));
  };
  if (t == nullptr) {
    require_callbacks();
    py::gil_scoped_acquire gil;
    std::vector<int64_t> owned(key);
    t = keep(owned,
             parse_template(callbacks->plan_linear(x, w, bias, residual, py_activation(), alpha, beta, out_dtype)));
  }
  if (t->python) {
    require_callbacks();
    py::gil_scoped_acquire gil;
    return callbacks->run_linear(x, w, bias, residual, py_activation(), alpha, beta, out_dtype).cast<at::Tensor>();
  }
  at::Tensor out = at::empty(t->out_shape, x.options().dtype(t->out_dtype));
  auto ptr = [](const std::optional<at::Tensor>& v) -> uint64_t {
    return v.has_value() && v->defined() ? reinterpret_cast<uint64_t>(v->data_ptr()) : 0;
  };
  uint64_t ptrs[kSources] = {reinterpret_cast<uint64_t>(x.data_ptr()), reinterpret_cast<uint64_t>(w.data_ptr()),
                             reinterpret_cast<uint64_t>(out.data_ptr()), ptr(bias), ptr(residual)};
  launch(*t, ptrs, static_cast<float>(alpha), static_cast<float>(beta), x.device().index(), scope.stream);
  return out;
}

// scaled_mm: the checks run once per signature in the planner (their address rules are in the key as
// each base's residue mod 16); a call the planner answers None for runs the Python path.
at::Tensor scaled_mm_cuda(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a,
                          const at::Tensor& scale_b, const std::optional<at::Tensor>& bias, const py::object& dtype,
                          int64_t settings) {
  at::ScalarType out_dtype = torch::python::detail::py_object_to_dtype(dtype);
  CallScope scope(a.device());
  thread_local std::vector<int64_t> key;
  scaled_mm_key(key, a, b, scale_a, scale_b, bias, out_dtype, settings, scope.capturing);
  auto t = find(key);
  auto py_bias = [&]() -> py::object { return bias.has_value() ? py::cast(*bias) : py::none(); };
  if (t == nullptr) {
    require_callbacks();
    py::gil_scoped_acquire gil;
    std::vector<int64_t> owned(key);
    t = keep(owned, parse_template(callbacks->plan_scaled_mm(a, b, scale_a, scale_b, py_bias(), dtype)));
  }
  if (t->python) {
    require_callbacks();
    py::gil_scoped_acquire gil;
    return callbacks->run_scaled_mm(a, b, scale_a, scale_b, py_bias(), dtype).cast<at::Tensor>();
  }
  at::Tensor out = at::empty(t->out_shape, a.options().dtype(t->out_dtype));
  // Blockwise scale_a whose K-block-major view TMA cannot read in place (M = 1, or a pitch of M fp32 that
  // is not 16 bytes): copied into a zeroed buffer as library/fp8.py launch_args does, alive (and its
  // memory reused only in this stream's order) until the launch is queued.
  at::Tensor padded;
  if (t->pad_rows > 0) {
    padded = at::zeros({t->pad_rows, t->pad_pitch}, scale_a.options());
    padded.narrow(1, 0, scale_a.size(0)).copy_(scale_a.t());
  }
  uint64_t ptrs[kSources] = {reinterpret_cast<uint64_t>(a.data_ptr()),
                             reinterpret_cast<uint64_t>(b.data_ptr()),
                             reinterpret_cast<uint64_t>(out.data_ptr()),
                             bias.has_value() ? reinterpret_cast<uint64_t>(bias->data_ptr()) : 0,
                             0,
                             reinterpret_cast<uint64_t>(scale_a.data_ptr()),
                             reinterpret_cast<uint64_t>(scale_b.data_ptr()),
                             padded.defined() ? reinterpret_cast<uint64_t>(padded.data_ptr()) : 0};
  launch(*t, ptrs, 1.0f, 1.0f, a.device().index(), scope.stream);
  return out;
}

// --- the planned ops: the grouped ops (ops_grouped.py, ops_grouped_swiglu.py) and swiglu (ops.py) -------------

// Their CUDA kernels, each registered in a torch::Library of its own (the grouped ops' over the Python kernels
// custom_op made, CompositeExplicitAutograd: a CUDA kernel comes first; swiglu's after ops.py removed its
// Python CUDA kernel). One plain launch per call where the op's planner (registered from Python with
// set_op_callbacks) gives a template: tensor maps for the op's first tensor (a: x), its second (b: w, w_gate),
// w_up and out, pointers to out, offs and bias; the rest (batched, empty, K = 0, the fused build's refusals,
// swiglu's two-launch and padded paths) runs the op's Python kernel.
enum PlannedOp : int64_t { kGroupedMm = 11, kGroupedLinear = 12, kGroupedLinearAct = 13, kGroupedSwiglu = 14,
                           kSwiglu = 15 };
constexpr int kPlannedOps = 5;
static const char* planned_op_names[kPlannedOps] = {"grouped_mm", "grouped_linear", "grouped_linear_act",
                                                    "grouped_swiglu_fused", "swiglu"};

struct OpCallbacks {
  py::object plan[kPlannedOps], run[kPlannedOps];
};
static OpCallbacks* op_callbacks = nullptr;  // never destroyed: Python may be finalised first

// ``variant``: what else the op's call depends on (linear_act's activation, swiglu's grad flag), -1 if nothing.
static void planned_key(std::vector<int64_t>& k, int64_t op, bool capturing, int64_t out_dtype, int64_t variant,
                        const at::Tensor& a, const at::Tensor& b, const std::optional<at::Tensor>& offs,
                        const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& w_up) {
  k.clear();
  k.push_back(op);
  k.push_back(capturing);
  k.push_back(out_dtype);
  k.push_back(variant);
  push_tensor(k, a);
  push_tensor(k, b);
  push_optional(k, offs);
  push_optional(k, bias);
  push_optional(k, w_up);
}

static uint64_t address(const std::optional<at::Tensor>& t) {
  return t.has_value() && t->defined() ? reinterpret_cast<uint64_t>(t->data_ptr()) : 0;
}

// One planned op's call: its template (planned once per signature), else its Python kernel. ``py_args``
// builds the op's arguments for the planner and the Python kernel (called with the GIL held).
static at::Tensor planned_call(int64_t op, const at::Tensor& a, const at::Tensor& b,
                               const std::optional<at::Tensor>& offs, const std::optional<at::Tensor>& bias,
                               const std::optional<at::Tensor>& w_up, int64_t variant, int64_t out_dtype,
                               const std::function<py::tuple()>& py_args) {
  const int slot = static_cast<int>(op - kGroupedMm);
  TORCH_CHECK(op_callbacks != nullptr && op_callbacks->plan[slot], "gemm_ladder host: the planner of ",
              planned_op_names[slot], " is not registered (gemm_ladder.ops.use_host registers swiglu's, importing ",
              "gemm_ladder.ops_grouped and ops_grouped_swiglu the grouped ops')");
  auto here = [&](const std::optional<at::Tensor>& t) { return !t.has_value() || t->device() == a.device(); };
  if (!a.is_cuda() || b.device() != a.device() || !here(offs) || !here(bias) || !here(w_up)) {
    py::gil_scoped_acquire gil;  // the Python kernel's checks name the tensor on another device
    return op_callbacks->run[slot](*py_args()).cast<at::Tensor>();
  }
  CallScope scope(a.device());
  thread_local std::vector<int64_t> key;
  planned_key(key, op, scope.capturing, out_dtype, variant, a, b, offs, bias, w_up);
  auto t = find(key);
  if (t == nullptr) {
    py::gil_scoped_acquire gil;
    std::vector<int64_t> owned(key);  // the planner may re-enter an op on this thread (the key is thread-local)
    t = keep(owned, parse_template(op_callbacks->plan[slot](*py_args())));  // raises the library's errors
  }
  if (t->python) {
    py::gil_scoped_acquire gil;
    return op_callbacks->run[slot](*py_args()).cast<at::Tensor>();
  }
  at::Tensor out = at::empty(t->out_shape, a.options().dtype(t->out_dtype));
  uint64_t ptrs[kSources] = {};
  ptrs[kA] = reinterpret_cast<uint64_t>(a.data_ptr());
  ptrs[kB] = reinterpret_cast<uint64_t>(b.data_ptr());
  ptrs[kOut] = reinterpret_cast<uint64_t>(out.data_ptr());
  ptrs[kBias] = address(bias);
  ptrs[kOffs] = address(offs);
  ptrs[kWUp] = address(w_up);
  launch(*t, ptrs, 1.0f, 1.0f, a.device().index(), scope.stream);
  return out;
}

static py::object optional_arg(const std::optional<at::Tensor>& t) { return t.has_value() ? py::cast(*t) : py::none(); }

at::Tensor grouped_mm_cuda(const at::Tensor& a, const at::Tensor& b, const std::optional<at::Tensor>& offs,
                           std::optional<at::ScalarType> out_dtype) {
  return planned_call(kGroupedMm, a, b, offs, std::nullopt, std::nullopt, -1, dtype_code(out_dtype),
                      [&] { return py::make_tuple(a, b, optional_arg(offs), out_dtype); });
}

at::Tensor grouped_linear_cuda(const at::Tensor& x, const at::Tensor& w, const at::Tensor& offs,
                               const std::optional<at::Tensor>& bias) {
  return planned_call(kGroupedLinear, x, w, offs, bias, std::nullopt, -1, -1,
                      [&] { return py::make_tuple(x, w, offs, optional_arg(bias)); });
}

at::Tensor grouped_linear_act_cuda(const at::Tensor& x, const at::Tensor& w, const at::Tensor& offs,
                                   const std::optional<at::Tensor>& bias, c10::string_view activation) {
  std::optional<c10::string_view> act(activation);
  return planned_call(kGroupedLinearAct, x, w, offs, bias, std::nullopt, activation_id(act), -1, [&] {
    return py::make_tuple(x, w, offs, optional_arg(bias), py::str(std::string(activation.data(), activation.size())));
  });
}

at::Tensor grouped_swiglu_fused_cuda(const at::Tensor& x, const at::Tensor& w_gate, const at::Tensor& w_up,
                                     const at::Tensor& offs) {
  return planned_call(kGroupedSwiglu, x, w_gate, offs, std::nullopt, w_up, -1, -1,
                      [&] { return py::make_tuple(x, w_gate, w_up, offs); });
}

// swiglu has no backward: with grad mode on and an input requiring grad the planner raises (the library's
// NotSupportedError), so that flag is in the key and no template is ever kept under it.
static bool swiglu_grad(const at::Tensor& x, const at::Tensor& w_gate, const at::Tensor& w_up) {
  return at::GradMode::is_enabled() && (x.requires_grad() || w_gate.requires_grad() || w_up.requires_grad());
}

at::Tensor swiglu_cuda(const at::Tensor& x, const at::Tensor& w_gate, const at::Tensor& w_up) {
  return planned_call(kSwiglu, x, w_gate, std::nullopt, std::nullopt, w_up, swiglu_grad(x, w_gate, w_up), -1,
                      [&] { return py::make_tuple(x, w_gate, w_up); });
}

// The planner and Python kernel of planned op ``name`` (one of planned_op_names).
void set_op_callbacks(const std::string& name, py::object plan, py::object run) {
  if (op_callbacks == nullptr) op_callbacks = new OpCallbacks();
  for (int i = 0; i < kPlannedOps; ++i) {
    if (name == planned_op_names[i]) {
      op_callbacks->plan[i] = std::move(plan);
      op_callbacks->run[i] = std::move(run);
      return;
    }
  }
  TORCH_CHECK_VALUE(false, "gemm_ladder host: no planned op ", name);
}

static std::unordered_map<std::string, std::unique_ptr<torch::Library>>& op_libs() {
  static auto* libs = new std::unordered_map<std::string, std::unique_ptr<torch::Library>>();
  return *libs;
}

// Registers the CUDA kernel of planned op ``name`` (after its op is defined, its callbacks set and, for swiglu,
// its Python CUDA kernel removed), in a library of its own: unregister_op_kernels removes it alone.
void register_op_kernel(const std::string& name) {
  if (op_libs().count(name)) return;
  auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, "gemm_ladder", c10::DispatchKey::CUDA,
                                              __FILE__, __LINE__);
  if (name == "grouped_mm") {
    lib->impl("grouped_mm", TORCH_FN(grouped_mm_cuda));
  } else if (name == "grouped_linear") {
    lib->impl("grouped_linear", TORCH_FN(grouped_linear_cuda));
  } else if (name == "grouped_linear_act") {
    lib->impl("grouped_linear_act", TORCH_FN(grouped_linear_act_cuda));
  } else if (name == "grouped_swiglu_fused") {
    lib->impl("grouped_swiglu_fused", TORCH_FN(grouped_swiglu_fused_cuda));
  } else if (name == "swiglu") {
    lib->impl("swiglu", TORCH_FN(swiglu_cuda));
  } else {
    TORCH_CHECK_VALUE(false, "gemm_ladder host: no planned op ", name);
  }
  op_libs()[name] = std::move(lib);
}

// Removes the CUDA kernels of these planned ops (the ones registered; never while one runs).
void unregister_op_kernels(const std::vector<std::string>& names) {
  for (const auto& name : names) op_libs().erase(name);
}

py::bytes op_signature(int64_t op, const at::Tensor& a, const at::Tensor& b, const std::optional<at::Tensor>& offs,
                       const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& w_up,
                       std::optional<std::string> activation, std::optional<at::ScalarType> out_dtype,
                       bool capturing) {
  int64_t variant = -1;
  if (op == kSwiglu) {
    TORCH_CHECK_VALUE(w_up.has_value() && w_up->defined(), "gemm_ladder host: swiglu's signature needs w_up");
    variant = swiglu_grad(a, b, *w_up);
  } else if (activation.has_value()) {
    variant = activation_id(c10::string_view(activation->data(), activation->size()));
  }
  std::vector<int64_t> k;
  planned_key(k, op, capturing, dtype_code(out_dtype), variant, a, b, offs, bias, w_up);
  return py::bytes(reinterpret_cast<const char*>(k.data()), k.size() * sizeof(int64_t));
}

// swiglu called from Python as mm_entry is (a typed dispatcher call: autograd, FakeTensor and every key see it).
at::Tensor swiglu_entry(const at::Tensor& x, const at::Tensor& w_gate, const at::Tensor& w_up) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("gemm_ladder::swiglu", "")
                       .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)>();
  return op.call(x, w_gate, w_up);
}

// --- test and introspection hooks -----------------------------------------------------------------

static py::bytes key_bytes(const std::vector<int64_t>& k) {
  return py::bytes(reinterpret_cast<const char*>(k.data()), k.size() * sizeof(int64_t));
}

py::bytes mm_signature(const at::Tensor& a, const at::Tensor& b, std::optional<at::ScalarType> out_dtype, bool capturing) {
  std::vector<int64_t> k;
  mm_key(k, a, b, out_dtype, capturing);
  return key_bytes(k);
}

py::bytes linear_signature(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& bias,
                           const std::optional<at::Tensor>& residual, std::optional<std::string> activation,
                           double alpha, double beta, std::optional<at::ScalarType> out_dtype, bool capturing) {
  std::optional<c10::string_view> act;
  if (activation.has_value()) act = c10::string_view(activation->data(), activation->size());
  std::vector<int64_t> k;
  linear_key(k, x, w, bias, residual, act, alpha, beta, out_dtype, capturing);
  return key_bytes(k);
}

py::bytes scaled_mm_signature(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a,
                              const at::Tensor& scale_b, const std::optional<at::Tensor>& bias,
                              const py::object& out_dtype, int64_t settings, bool capturing) {
  std::vector<int64_t> k;
  scaled_mm_key(k, a, b, scale_a, scale_b, bias, torch::python::detail::py_object_to_dtype(out_dtype), settings,
                capturing);
  return key_bytes(k);
}

// The argument buffer a template gives the kernel for these addresses (Source order, the missing ones 0)
// and scalars (maps left as the template has them, workspace pointers untouched): what the CPU tests
// compare with Python's packing.
py::bytes patched_buffer(const py::object& tmpl, const std::vector<uint64_t>& ptrs, double alpha, double beta) {
  Template t = parse_template(tmpl);
  TORCH_CHECK(!t.python && ptrs.size() <= kSources, "patched_buffer takes a template and at most ", kSources,
              " addresses");
  uint64_t all[kSources] = {};
  std::copy(ptrs.begin(), ptrs.end(), all);
  std::vector<uint8_t> buf(t.buffer);
  patch(t, buf.data(), all, static_cast<float>(alpha), static_cast<float>(beta), false);
  return py::bytes(reinterpret_cast<const char*>(buf.data()), buf.size());
}

// Which path a signature takes: "C++" (a template), "python", or None (not planned yet).
py::object path_of(const py::bytes& key) {
  std::string s = key;
  std::vector<int64_t> k(s.size() / sizeof(int64_t));
  std::memcpy(k.data(), s.data(), k.size() * sizeof(int64_t));
  auto t = find(k);
  if (t == nullptr) return py::none();
  return py::str(t->python ? "python" : "C++");
}

void set_callbacks(py::object plan_mm, py::object plan_linear, py::object run_mm, py::object run_linear,
                   py::object plan_scaled_mm, py::object run_scaled_mm) {
  if (callbacks == nullptr) callbacks = new Callbacks();
  callbacks->plan_mm = std::move(plan_mm);
  callbacks->plan_linear = std::move(plan_linear);
  callbacks->run_mm = std::move(run_mm);
  callbacks->run_linear = std::move(run_linear);
  callbacks->plan_scaled_mm = std::move(plan_scaled_mm);
  callbacks->run_scaled_mm = std::move(run_scaled_mm);
}

void clear() {
  std::lock_guard<std::mutex> guard(cache_lock);
  cache().clear();
}

int64_t stats_planner_calls() {
  std::lock_guard<std::mutex> guard(cache_lock);
  return planner_calls;
}

int64_t stats_launches() { return launch_count.load(); }

int64_t stats_signatures() {
  std::lock_guard<std::mutex> guard(cache_lock);
  return static_cast<int64_t>(cache().size());
}

static std::unique_ptr<torch::Library> cuda_lib;

// Registers the CUDA kernels. Called from Python after the Python kernels it replaces are removed,
// so no registration overrides another; unregister_kernels removes them (never while one runs).
void register_kernels() {
  if (cuda_lib) return;
  cuda_lib = std::make_unique<torch::Library>(torch::Library::IMPL, "gemm_ladder", c10::DispatchKey::CUDA, __FILE__,
                                              __LINE__);
  cuda_lib->impl("mm", TORCH_FN(mm_cuda));
  cuda_lib->impl("linear", TORCH_FN(linear_cuda));
}

void unregister_kernels() { cuda_lib.reset(); }

void register_autograd();  // autograd.cpp
void unregister_autograd();
at::Tensor mm_entry(const at::Tensor& a, const at::Tensor& b, std::optional<at::ScalarType> out_dtype);
at::Tensor linear_entry(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& bias,
                        const std::optional<at::Tensor>& residual, std::optional<std::string> activation,
                        double alpha, double beta, std::optional<at::ScalarType> out_dtype);

static std::optional<at::ScalarType> dtype_arg(const py::object& d) {
  if (d.is_none()) return std::nullopt;
  return torch::python::detail::py_object_to_dtype(d);
}

// Errors as torch's own bindings raise them (HANDLE_TH_ERRORS): a Python kernel's exception (the
// planner's GemmInputError, a fake's) comes back as itself, a c10::Error as RuntimeError without the
// C++ backtrace, c10's ValueError/TypeError/NotImplementedError as theirs.
at::Tensor py_mm(const at::Tensor& a, const at::Tensor& b, const py::object& out_dtype) {
  HANDLE_TH_ERRORS
  return mm_entry(a, b, dtype_arg(out_dtype));
  END_HANDLE_TH_ERRORS_PYBIND
}

at::Tensor py_linear(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& bias,
                     const std::optional<at::Tensor>& residual, std::optional<std::string> activation, double alpha,
                     double beta, const py::object& out_dtype) {
  HANDLE_TH_ERRORS
  return linear_entry(x, w, bias, residual, std::move(activation), alpha, beta, dtype_arg(out_dtype));
  END_HANDLE_TH_ERRORS_PYBIND
}

// scaled_mm's eager entry: gemm_ladder.scaled_mm calls it for a functional call with a bf16, fp16 or fp32
// output, after checking that a is on a CUDA device and every tensor a plain strided one (anything else
// takes the Python path and its errors; the planner checks the rest). Errors come back as py_mm's do.
at::Tensor py_scaled_mm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a, const at::Tensor& scale_b,
                        const std::optional<at::Tensor>& bias, const py::object& out_dtype, int64_t settings) {
  HANDLE_TH_ERRORS
  return scaled_mm_cuda(a, b, scale_a, scale_b, bias, out_dtype, settings);
  END_HANDLE_TH_ERRORS_PYBIND
}

// swiglu's eager entry: gemm_ladder.swiglu calls it for plain CUDA tensors. Errors come back as py_mm's do.
at::Tensor py_swiglu(const at::Tensor& x, const at::Tensor& w_gate, const at::Tensor& w_up) {
  HANDLE_TH_ERRORS
  return swiglu_entry(x, w_gate, w_up);
  END_HANDLE_TH_ERRORS_PYBIND
}

}  // namespace gl_host

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "gemm-ladder's compiled host path (gemm_ladder/host/launch.cpp)";
  m.def("set_callbacks", &gl_host::set_callbacks);
  m.def("register_kernels", &gl_host::register_kernels);
  m.def("unregister_kernels", &gl_host::unregister_kernels);
  m.def("register_autograd", &gl_host::register_autograd);
  m.def("unregister_autograd", &gl_host::unregister_autograd);
  m.def("clear", &gl_host::clear);
  m.def("planner_calls", &gl_host::stats_planner_calls);
  m.def("signatures", &gl_host::stats_signatures);
  m.def("launches", &gl_host::stats_launches);
  m.def("mm_signature", &gl_host::mm_signature);
  m.def("linear_signature", &gl_host::linear_signature);
  m.def("patched_buffer", &gl_host::patched_buffer);
  m.def("path_of", &gl_host::path_of);
  m.def("mm", &gl_host::py_mm);
  m.def("linear", &gl_host::py_linear);
  m.def("scaled_mm", &gl_host::py_scaled_mm);
  m.def("scaled_mm_signature", &gl_host::scaled_mm_signature);
  m.def("set_op_callbacks", &gl_host::set_op_callbacks);
  m.def("register_op_kernel", &gl_host::register_op_kernel);
  m.def("unregister_op_kernels", &gl_host::unregister_op_kernels);
  m.def("op_signature", &gl_host::op_signature);
  m.def("swiglu", &gl_host::py_swiglu);
  m.attr("PLANNED_OPS") = py::make_tuple("grouped_mm", "grouped_linear", "grouped_linear_act", "grouped_swiglu_fused",
                                         "swiglu");
}

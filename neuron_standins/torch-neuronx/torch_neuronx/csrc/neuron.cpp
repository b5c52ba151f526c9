// REHEARSAL STAND-IN for TorchNeuron's device layer: the `neuron` device
// (PrivateUse1) backed by host memory. Everything a real backend registers in
// C++ lives here: allocator (with per-core cap), device guard, hooks,
// generator, the few native kernels that must share storage, a zero-copy CPU
// fallback for every other op, and the exclusive reservation of NeuronCores.
//
// Follows the structure of PyTorch's torch_openreg example
// (test/cpp_extensions/open_registration_extension/torch_openreg).

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/Operators.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/Tensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice_ops.h>
#include <ATen/ops/_local_scalar_dense_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

namespace neuron {

using c10::DeviceType;
constexpr DeviceType kNeuron = DeviceType::PrivateUse1;

// ---------------------------------------------------------------- config --

std::string env_or(const char* name, const std::string& dflt) {
  const char* v = std::getenv(name);
  return (v && *v) ? std::string(v) : dflt;
}

// 24 GiB: device memory of one logical NeuronCore at LNC=2 on Trainium2.
constexpr int64_t kDefaultCoreMemory = int64_t(24) << 30;

int64_t memory_cap() {
  static const int64_t cap = std::stoll(env_or(
      "NEURON_REHEARSAL_CORE_MEMORY_BYTES", std::to_string(kDefaultCoreMemory)));
  return cap;
}

// The instance's logical cores: NEURON_REHEARSAL_NUM_CORES, else those of the rehearsed
// trn2.3xlarge (one Trainium2 device, 8 physical cores) at the runtime's LNC
// (NEURON_LOGICAL_NC_CONFIG, default 2): 4 at LNC=2, 8 at LNC=1.
int instance_cores() {
  const int lnc = std::stoi(env_or("NEURON_LOGICAL_NC_CONFIG", "2"));
  return std::stoi(env_or("NEURON_REHEARSAL_NUM_CORES", std::to_string(8 / (lnc == 1 ? 1 : 2))));
}

struct Ownership;
const Ownership& ownership();

// NEURON_RT_VISIBLE_CORES ("3", "0-3", "0,1", "0-1,4"); if unset: LOCAL_RANK
// under a launcher (and the variable is then set, as TorchNeuron does), else
// every core of the instance.
std::string visible_cores_spec() {
  ownership();  // which device index is this process's is decided by the variable as it was before
  if (!std::getenv("NEURON_RT_VISIBLE_CORES")) {
    if (const char* lr = std::getenv("LOCAL_RANK")) {
      setenv("NEURON_RT_VISIBLE_CORES", lr, 0);
    }
  }
  const int total = instance_cores();
  return env_or("NEURON_RT_VISIBLE_CORES", "0-" + std::to_string(total - 1));
}

std::vector<int> parse_cores(const std::string& spec) {
  std::vector<int> cores;
  std::stringstream ss(spec);
  std::string part;
  while (std::getline(ss, part, ',')) {
    auto dash = part.find('-');
    try {
      int lo = std::stoi(part.substr(0, dash));
      int hi = dash == std::string::npos ? lo : std::stoi(part.substr(dash + 1));
      TORCH_CHECK(lo >= 0 && hi >= lo, "bad range");
      for (int c = lo; c <= hi; ++c) cores.push_back(c);
    } catch (const std::exception&) {
      TORCH_CHECK(false, "NRT: invalid NEURON_RT_VISIBLE_CORES='", spec,
                  "' (expected e.g. 3, 0-3 or 0,1)");
    }
  }
  TORCH_CHECK(!cores.empty(), "NRT: empty NEURON_RT_VISIBLE_CORES");
  return cores;
}

// ------------------------------------------------------- device ownership --
// Which torch device index is this process's one logical core, and what device_count() says.
// Decided once, from the environment as the process found it (before the stand-in sets
// NEURON_RT_VISIBLE_CORES from LOCAL_RANK):
//   - NEURON_RT_VISIBLE_CORES set (a list of n cores): n devices, and the process's first core
//     is index 0: "The first NeuronCore owned by the application will always have the index 0
//     - for example, even if when setting NEURON_RT_VISIBLE_CORES=3,4, the two NeuronCores
//     will be referred to as 0 and 1" (aws-neuron-sdk neuron-runtime/guides/nrt-developer-guide.rst,
//     nrt_load's start_nc; that TorchNeuron's device index follows the runtime's is ASSUMED).
//     The stand-in runs one core per process: indices 1..n-1 are refused (one device per
//     process: CONTRACTS.md "Topology").
//   - unset, under a launcher (LOCAL_RANK=k): TorchNeuron sets the variable to LOCAL_RANK
//     (CONTRACTS.md "Topology": "if NEURON_RT_VISIBLE_CORES is unset it is set to LOCAL_RANK")
//     and the process's device is index k of the instance's cores: the write-up's launch line
//     sets no variable, and its torchtitan (the fork, upstream main of 5059f32c5's vintage)
//     selects torch.device("neuron:LOCAL_RANK") (trainer.py) and trained on 64 ranks.
//   - unset, no launcher: every core of the instance, the first of them index 0.
struct Ownership {
  c10::DeviceIndex index;  // the one device index this process uses
  c10::DeviceIndex count;  // torch.neuron.device_count()
  std::string rule;        // why (for the refusal of any other index)
};

Ownership compute_ownership() {
  const char* visible = std::getenv("NEURON_RT_VISIBLE_CORES");
  const char* local = std::getenv("LOCAL_RANK");
  try {
    if (visible && *visible) {
      const auto n = parse_cores(visible).size();
      return {0, c10::DeviceIndex(n),
              "NEURON_RT_VISIBLE_CORES=" + std::string(visible) + " gives this process " + std::to_string(n) +
                  " logical NeuronCore(s), numbered from 0 (\"The first NeuronCore owned by the application will "
                  "always have the index 0\", aws-neuron-sdk neuron-runtime/guides/nrt-developer-guide.rst); the "
                  "rehearsal runs one core per process, index 0"};
    }
    if (local && *local) {
      const int k = std::stoi(local);
      return {c10::DeviceIndex(k), c10::DeviceIndex(instance_cores()),
              "NEURON_RT_VISIBLE_CORES was unset, so TorchNeuron took logical core LOCAL_RANK=" + std::to_string(k) +
                  " (CONTRACTS.md \"Topology\"), which is device index " + std::to_string(k)};
    }
  } catch (const std::exception&) {
    // a bad variable is refused with the runtime's words when the cores are reserved
  }
  return {0, c10::DeviceIndex(instance_cores()),
          "NEURON_RT_VISIBLE_CORES and LOCAL_RANK are unset: every core of the instance is this process's, the "
          "rehearsal runs the first (index 0)"};
}

const Ownership& ownership() {
  static const Ownership o = compute_ownership();
  return o;
}

c10::Device own_device() { return c10::Device(kNeuron, ownership().index); }

// ------------------------------------------------- exclusive core locking --
// One lock file per core in NEURON_REHEARSAL_LOCK_DIR; flock(LOCK_EX) held
// (fd never closed) until the process exits, like the runtime's reservation.
//
// WHEN: torch_neuronx/__init__.py calls init() as the package is imported (import torch
// autoloads it), i.e. the cores are reserved before any of the process's own code runs.
// ASSUMED (the docs do not say when TorchNeuron starts the runtime; configuration-guide.rst
// only says the runtime reserves the cores it initialises): at import is the side worse for
// a launcher, which must then pin a rank's core before the rank's interpreter starts, and
// keep TorchNeuron out of every process that must hold no core (a torchrun agent).
//
// DEVICE NODES: the runtime reaches a device through its node /dev/neuron<N> (a container
// is given the nodes of its devices: aws-neuron-sdk containers/tutorials/
// ks8-neuron-scheduler-flow.rst, "--device=/dev/neuron1"). The reservation opens the node of
// each reserved core's device, kept open as long as the locks, so the holder shows in the
// process's own open files (/proc/<pid>/fd), in any PID namespace. Stand-in nodes live in
// NEURON_REHEARSAL_DEV_DIR (the session's stand-in /dev); a missing node is refused, as a
// device the container was not given. Unset: no node is opened (ASSUMED; only processes
// outside a rehearsal session, e.g. the stand-ins' own tests, run that way).

// The logical cores of one device at the host's LNC (8 physical cores per Trainium2 device):
// NEURON_REHEARSAL_CORES_PER_DEVICE where the rehearsal's host sets its LNC by another control
// than the variable (the node's logical_nc_config file), else the runtime's variable.
int cores_per_device() {
  const std::string given = env_or("NEURON_REHEARSAL_CORES_PER_DEVICE", "");
  if (!given.empty()) return std::stoi(given);
  return std::stoi(env_or("NEURON_LOGICAL_NC_CONFIG", "2")) == 1 ? 8 : 4;
}

// Opens (and keeps open) the device node of every reserved core; false with `why` set if one is missing.
bool open_device_nodes(const std::vector<int>& cores, std::vector<int>& fds, std::string& why) {
  const char* dir = std::getenv("NEURON_REHEARSAL_DEV_DIR");
  if (!dir || !*dir) return true;
  std::vector<int> devices;
  for (int c : cores) {
    const int d = c / cores_per_device();
    if (devices.empty() || devices.back() != d) devices.push_back(d);
  }
  for (int d : devices) {
    const std::string node = std::string(dir) + "/neuron" + std::to_string(d);
    int fd = ::open(node.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      why = node + ": " + std::strerror(errno);
      return false;
    }
    fds.push_back(fd);
  }
  return true;
}

std::mutex g_init_mu;
std::atomic<bool> g_initialized{false};

void reserve_cores() {
  if (g_initialized) return;
  std::lock_guard<std::mutex> lk(g_init_mu);
  if (g_initialized) return;
  const std::string spec = visible_cores_spec();
  const std::vector<int> cores = parse_cores(spec);
  const int total = instance_cores();
  const std::string dir = env_or("NEURON_REHEARSAL_LOCK_DIR", "/tmp/neuron-rehearsal-cores");
  ::mkdir(dir.c_str(), 0777);
  std::vector<int> fds;
  auto release = [&] { for (int fd : fds) ::close(fd); };
  for (int c : cores) {
    if (c >= total) {
      release();
      TORCH_CHECK(false, "NRT:nrt_allocate_neuron_cores Logical Neuron Core(s) not available - Requested:lnc",
                  cores.front(), "-lnc", cores.back(), " Available:", total,
                  " (rehearsal: NEURON_RT_VISIBLE_CORES=", spec, " but the instance has ", total,
                  " logical cores, NEURON_REHEARSAL_NUM_CORES)");
    }
    const std::string path = dir + "/core" + std::to_string(c) + ".lock";
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    TORCH_CHECK(fd >= 0, "neuron rehearsal: cannot open ", path, ": ", std::strerror(errno));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      char buf[32] = {0};
      ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
      std::string holder = n > 0 ? std::string(buf, n) : "?";
      while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
      ::close(fd);
      release();
      TORCH_CHECK(false, "NRT:nrt_allocate_neuron_cores Logical Neuron Core(s) not available - Requested:lnc",
                  cores.front(), "-lnc", cores.back(), " Available:0 (cores busy; rehearsal: logical core ", c,
                  " is held by pid ", holder, ", lock ", path, ")");
    }
    std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd, 0) == 0) { (void)!::pwrite(fd, pid.data(), pid.size(), 0); }
    fds.push_back(fd);
  }
  std::string why;
  if (!open_device_nodes(cores, fds, why)) {
    release();
    TORCH_CHECK(false, "NRT:nrt_allocate_neuron_cores Logical Neuron Core(s) not available - Requested:lnc",
                cores.front(), "-lnc", cores.back(), " (rehearsal: no device node for NEURON_RT_VISIBLE_CORES=",
                spec, ": ", why, ")");
  }
  g_initialized = true;  // fds intentionally leaked: locks and nodes live as long as the process
}

// -------------------------------------------------------------- allocator --

using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

struct NeuronAllocator final : c10::DeviceAllocator {
  std::mutex mu;
  DeviceStats stats;
  static constexpr size_t kHeader = 64;  // holds the size; keeps 64-byte alignment

  void update(size_t n, bool alloc) {
    const size_t pool = n >= (1 << 20) ? size_t(StatType::LARGE_POOL) : size_t(StatType::SMALL_POOL);
    for (size_t i : {size_t(StatType::AGGREGATE), pool}) {
      for (auto* s : {&stats.allocated_bytes[i], &stats.reserved_bytes[i], &stats.active_bytes[i],
                      &stats.requested_bytes[i]}) {
        alloc ? s->increase(n) : s->decrease(n);
      }
      for (auto* s : {&stats.allocation[i], &stats.segment[i], &stats.active[i]}) {
        alloc ? s->increase(1) : s->decrease(1);
      }
    }
    alloc ? ++stats.num_device_alloc : ++stats.num_device_free;
  }

  static void free_block(void* ctx);

  c10::DataPtr allocate(size_t n) override {
    reserve_cores();  // reserved at import already (torch_neuronx/__init__.py); a no-op then
    if (n == 0) return {nullptr, nullptr, &free_block, own_device()};
    {
      std::lock_guard<std::mutex> lk(mu);
      const int64_t cur = stats.allocated_bytes[size_t(StatType::AGGREGATE)].current;
      if (cur + int64_t(n) > memory_cap()) {
        ++stats.num_ooms;
        TORCH_CHECK_WITH(OutOfMemoryError, false,
            "neuron: out of memory on logical NeuronCore ", visible_cores_spec(),
            " (NEURON_RT_VISIBLE_CORES): tried to allocate ", n, " bytes with ", cur,
            " bytes already allocated; the cap is ", memory_cap(),
            " bytes (NEURON_REHEARSAL_CORE_MEMORY_BYTES; rehearsal limit standing for the device memory "
            "of one logical core, 24 GiB at LNC=2 on Trainium2)");
      }
      update(n, true);
    }
    void* base = std::aligned_alloc(kHeader, ((n + kHeader + kHeader - 1) / kHeader) * kHeader);
    TORCH_CHECK_WITH(OutOfMemoryError, base, "neuron: host allocation of ", n, " bytes failed");
    *static_cast<size_t*>(base) = n;
    return {static_cast<char*>(base) + kHeader, base, &free_block, own_device()};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dst, const void* src, size_t n) const override { std::memcpy(dst, src, n); }

  // c10::DeviceAllocator: what torch.accelerator.memory_* reads.
  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t) override {}
  void recordStream(const c10::DataPtr&, c10::Stream) override {}
  DeviceStats getDeviceStats(c10::DeviceIndex) override {
    std::lock_guard<std::mutex> lk(mu);
    return stats;
  }
  void resetAccumulatedStats(c10::DeviceIndex) override {
    std::lock_guard<std::mutex> lk(mu);
    for (auto* a : {&stats.allocation, &stats.segment, &stats.active, &stats.allocated_bytes,
                    &stats.reserved_bytes, &stats.active_bytes, &stats.requested_bytes}) {
      for (auto& s : *a) s.reset_accumulated();
    }
    stats.num_alloc_retries = stats.num_ooms = 0;
  }
  void resetPeakStats(c10::DeviceIndex) override {
    std::lock_guard<std::mutex> lk(mu);
    for (auto* a : {&stats.allocation, &stats.segment, &stats.active, &stats.allocated_bytes,
                    &stats.reserved_bytes, &stats.active_bytes, &stats.requested_bytes}) {
      for (auto& s : *a) s.reset_peak();
    }
  }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex) override {
    std::lock_guard<std::mutex> lk(mu);
    const int64_t cur = stats.allocated_bytes[size_t(StatType::AGGREGATE)].current;
    return {size_t(memory_cap() - cur), size_t(memory_cap())};
  }
};

NeuronAllocator g_allocator;

void NeuronAllocator::free_block(void* ctx) {
  if (!ctx) return;
  const size_t n = *static_cast<size_t*>(ctx);
  {
    std::lock_guard<std::mutex> lk(g_allocator.mu);
    g_allocator.update(n, false);
  }
  std::free(ctx);
}

REGISTER_ALLOCATOR(kNeuron, &g_allocator);

// ---------------------------------------------------------- float64 ban --

// One exemption: torch's tensor printing converts device values to float64 to format them
// (torch/_tensor_str.py tensor_totype; only MPS/XPU-without-fp64/MAIA are spared). It runs under
// torch._C._DisableFuncTorch(), whose TLS exclusion is the signal used here.
bool fp64_exempt() {
  return c10::impl::tls_is_dispatch_key_excluded(c10::DispatchKey::FuncTorchDynamicLayerFrontMode);
}

void check_dtype(c10::ScalarType t) {
  TORCH_CHECK((t != c10::kDouble && t != c10::kComplexDouble) || fp64_exempt(),
      "neuron: ", (t == c10::kDouble ? "float64" : "complex128"), " tensors are not supported on the neuron device. This is the dress rehearsal's "
      "limit, standing for the hardware's: NeuronCore-v3 engines compute in cFP8/FP16/BF16/TF32/FP32 and "
      "INT8/16/32, with no FP64 (aws-neuron-sdk about-neuron/arch/neuron-hardware/neuron-core-v3.rst). "
      "Compute in float64 on the CPU instead, e.g. x.cpu().double().");
}

// ------------------------------------------------------------ generator --
// The device's default generator IS the CPU default generator: neuron random ops draw from the
// one global stream, in program order, exactly as on the CPU tier (bit-for-bit parity), and
// torch.utils.checkpoint's CPU RNG save/restore also covers them. Explicit generators
// (torch.Generator(device="neuron")) are neuron-typed wrappers around a CPU generator, which
// the fallback hands to the CPU kernels.

struct NeuronGenerator final : c10::GeneratorImpl {
  at::Generator cpu = at::detail::createCPUGenerator();
  NeuronGenerator() : c10::GeneratorImpl(own_device(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)) {}
  void set_current_seed(uint64_t s) override { cpu.set_current_seed(s); }
  void set_offset(uint64_t o) override { cpu.set_offset(o); }
  uint64_t get_offset() const override { return cpu.get_offset(); }
  uint64_t current_seed() const override { return cpu.current_seed(); }
  uint64_t seed() override { return cpu.seed(); }
  void set_state(const c10::TensorImpl& s) override { cpu.unsafeGetGeneratorImpl()->set_state(s); }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    return cpu.unsafeGetGeneratorImpl()->get_state();
  }

 private:
  NeuronGenerator* clone_impl() const override {
    auto* g = new NeuronGenerator();
    g->cpu = cpu.clone();
    return g;
  }
};

// ---------------------------------------------------------- device guard --
// One device per process (``ownership()``: index 0 of its visible cores, or LOCAL_RANK where
// TorchNeuron chose the core); work is synchronous, so streams are ids and events are timestamps.

std::atomic<c10::StreamId> g_next_stream{1};
thread_local c10::StreamId tls_stream = 0;

void check_index(c10::DeviceIndex i) {
  const Ownership& o = ownership();
  TORCH_CHECK(i == -1 || i == o.index, "neuron: invalid device index ", int(i), ": this process's device is neuron:",
              int(o.index), " (", o.rule, ")");
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct NeuronGuardImpl final : c10::impl::DeviceGuardImplInterface {
  NeuronGuardImpl() = default;
  explicit NeuronGuardImpl(DeviceType t) { TORCH_CHECK(t == kNeuron); }
  DeviceType type() const override { return kNeuron; }
  c10::Device exchangeDevice(c10::Device d) const override { check_index(d.index()); return own_device(); }
  c10::Device getDevice() const override { return own_device(); }
  void setDevice(c10::Device d) const override { check_index(d.index()); }
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device) const noexcept override {
    return c10::Stream(c10::Stream::UNSAFE, own_device(), tls_stream);
  }
  c10::Stream getDefaultStream(c10::Device) const override { return c10::Stream(c10::Stream::DEFAULT, own_device()); }
  c10::Stream getNewStream(c10::Device, int) const override {
    return c10::Stream(c10::Stream::UNSAFE, own_device(), g_next_stream++);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override { return getNewStream(d, 0); }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override {
    auto old = getStream(own_device());
    tls_stream = s.id();
    return old;
  }
  c10::DeviceIndex deviceCount() const noexcept override { return ownership().count; }
  void record(void** event, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag) const override {
    if (!*event) *event = new int64_t(0);
    *static_cast<int64_t*>(*event) = now_ns();
  }
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    delete static_cast<int64_t*>(event);
  }
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeEvent(void*) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const override {}
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
  double elapsedTime(void* e1, void* e2, const c10::DeviceIndex) const override {
    TORCH_CHECK(e1 && e2, "Both events must be recorded before calculating elapsed time.");
    return double(*static_cast<int64_t*>(e2) - *static_cast<int64_t*>(e1)) / 1e6;
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, NeuronGuardImpl);

// ----------------------------------------------------------------- hooks --

struct NeuronHooks final : at::PrivateUse1HooksInterface {
  void init() const override { reserve_cores(); }
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return g_initialized.load(); }
  c10::DeviceIndex deviceCount() const override { return ownership().count; }
  void setCurrentDevice(c10::DeviceIndex i) const override { check_index(i); }
  c10::DeviceIndex getCurrentDevice() const override { return ownership().index; }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex i) const override { check_index(i); return ownership().index; }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex) const override { return ownership().index; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex i) const override {
    check_index(i);
    return at::detail::getDefaultCPUGenerator();
  }
  at::Generator getNewGenerator(c10::DeviceIndex i) const override {
    check_index(i);
    return at::make_generator<NeuronGenerator>();
  }
  at::Device getDeviceFromPtr(void*) const override { return own_device(); }
  at::Allocator* getPinnedMemoryAllocator() const override { return c10::GetCPUAllocator(); }
  // untyped_storage().resize_(n): FSDP2 frees (n = 0) and re-allocates unsharded parameters this way.
  void resizePrivateUse1Bytes(const c10::Storage& s, size_t n) const override {
    at::native::resize_bytes_cpu(s.unsafeGetStorageImpl(), n);  // allocator-generic memcpy resize
    if (n == 0) s.unsafeGetStorageImpl()->set_data_ptr_noswap(at::DataPtr(nullptr, own_device()));  // stay on neuron
  }
};

static bool g_hooks_registered = [] {
  at::RegisterPrivateUse1HooksInterface(new NeuronHooks());
  return true;
}();

// ------------------------------------------------------ host (CPU) views --
// A neuron tensor's memory is host memory: a CPU tensor can alias it. Each
// neuron storage maps to one non-owning CPU storage, so aliasing between
// arguments (and views returned by a kernel) is preserved.

struct HostViews {
  std::vector<std::pair<c10::Storage, c10::Storage>> map;  // neuron storage, CPU alias

  c10::Storage cpu_storage(const c10::Storage& s) {
    for (auto& [n, c] : map) if (n.is_alias_of(s)) return c;
    map.emplace_back(s, c10::Storage(c10::Storage::use_byte_size_t(), s.nbytes(),
                                     at::DataPtr(s.mutable_data(), at::Device(at::kCPU))));
    return map.back().second;
  }
  at::Tensor host(const at::Tensor& t) {
    check_dtype(t.scalar_type());
    auto impl = c10::make_intrusive<c10::TensorImpl>(
        cpu_storage(t.storage()), c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
    impl->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
    return at::Tensor(std::move(impl));
  }
  // A kernel output that lives in one of our CPU aliases, as a neuron tensor on the same storage.
  at::Tensor neuron_view(const at::Tensor& cpu_t) {
    for (auto& [n, c] : map) {
      if (c.is_alias_of(cpu_t.storage())) {
        auto impl = c10::make_intrusive<c10::TensorImpl>(
            c10::Storage(n), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), cpu_t.dtype());
        impl->set_sizes_and_strides(cpu_t.sizes(), cpu_t.strides(), cpu_t.storage_offset());
        return at::Tensor(std::move(impl));
      }
    }
    return at::Tensor();
  }
  bool owns(const at::Tensor& cpu_t) {
    for (auto& [n, c] : map) if (c.is_alias_of(cpu_t.storage())) return true;
    return false;
  }
};

// ---------------------------------------------------------- native kernels --

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin, std::optional<c10::MemoryFormat> mf) {
  const auto st = c10::dtype_or_default(dtype);
  check_dtype(st);
  check_index(c10::device_or_default(device).index());
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided, "neuron: only strided tensors");
  return at::detail::empty_generic(size, &g_allocator, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), st, mf);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin) {
  const auto st = c10::dtype_or_default(dtype);
  check_dtype(st);
  check_index(c10::device_or_default(device).index());
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided, "neuron: only strided tensors");
  return at::detail::empty_strided_generic(size, stride, &g_allocator,
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), st);
}

at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                      std::optional<c10::SymInt> offset) {
  return at::native::as_strided_tensorimpl(
      self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
      offset ? std::optional<int64_t>(offset->expect_int()) : std::nullopt);
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor view_dtype(const at::Tensor& self, c10::ScalarType dtype) {
  check_dtype(dtype);
  return at::native::view_dtype(self, dtype);
}

at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride));
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size, std::optional<c10::MemoryFormat> mf) {
  return at::native::resize_(self, C10_AS_INTARRAYREF_SLOW(size), mf);
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  HostViews v;
  at::Tensor d = dst.is_privateuseone() ? v.host(dst) : dst;
  at::native::copy_(d, self.is_privateuseone() ? v.host(self) : self, non_blocking);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::native::resize_(dst, self.sizes(), std::nullopt);
  return copy_from(self, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  HostViews v;
  return at::native::_local_scalar_dense_cpu(v.host(self));
}

at::Tensor& set_storage(at::Tensor& self, at::Storage src, c10::SymInt offset, c10::SymIntArrayRef size,
                        c10::SymIntArrayRef stride) {
  return at::native::set_storage_cpu_(self, src, offset.expect_int(), C10_AS_INTARRAYREF_SLOW(size),
                                      C10_AS_INTARRAYREF_SLOW(stride));
}
at::Tensor& set_source_storage(at::Tensor& self, at::Storage src) { return at::native::set_(self, src); }
at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& src) { return at::native::set_tensor_(self, src); }
at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage s(c10::Storage::use_byte_size_t(), 0, &g_allocator, true);
  return at::native::set_storage_cpu_(self, s, 0, {0}, {});
}

void record_stream(at::Tensor&, c10::Stream) {}  // synchronous device: nothing to track

// SDPA picks its kernel through a per-device stub; answer as the CPU does, so
// F.scaled_dot_product_attention runs the same CPU kernels (flash for CPU)
// bit for bit. Only metadata is read, so meta tensors stand in (works under
// FakeTensor tracing too).
int64_t fused_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                         std::optional<double> scale, bool enable_gqa) {
  auto meta = [](const at::Tensor& t) {
    return at::Tensor(at::detail::empty_strided_symint_meta(t.sym_sizes(), t.sym_strides(), t.scalar_type()));
  };
  std::optional<at::Tensor> m;
  if (mask && mask->defined()) m = meta(*mask);
  return at::_ops::_fused_sdp_choice::redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU), meta(q), meta(k),
                                                 meta(v), m, dropout_p, is_causal, scale, enable_gqa);
}
}  // namespace neuron
namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &neuron::fused_sdp_choice);
}  // namespace at::native
namespace neuron {

// ------------------------------------------------------------ fallback --
// Every op without a neuron kernel runs its CPU kernel on host views of the
// neuron tensors: no copies in, in-place writes land in device memory, views
// come back as neuron views; only fresh outputs are copied to the device.
// Ops with out= arguments (which may resize them) take PyTorch's copying
// at::native::cpu_fallback.

at::Generator cpu_generator(const at::Generator& g) {
  if (g.device().type() != kNeuron) return g;
  return static_cast<NeuronGenerator*>(g.unsafeGetGeneratorImpl())->cpu;
}

void check_same_device(const at::Tensor& t, const c10::OperatorHandle& op) {
  // A real device refuses CPU operands (0-dim ones are scalars; copies may cross devices): keep that.
  TORCH_CHECK(!(t.defined() && t.is_cpu() && t.dim() > 0) ||
                  op.schema().name().find("copy") != std::string::npos,
              "Expected all tensors to be on the same device, but found at least two devices, neuron:0 and cpu! "
              "(operator ", op.schema().operator_name(), ")");
}

void neuron_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const auto& args = schema.arguments();
  const size_t begin = stack->size() - args.size();
  bool has_out = false;
  for (size_t i = 0; i < args.size(); ++i) {
    auto& iv = (*stack)[begin + i];
    if (iv.isGenerator()) iv = cpu_generator(iv.toGenerator());
    has_out |= args[i].is_out();
  }
  if (has_out) {
    at::native::cpu_fallback(op, stack);
    return;
  }

  HostViews views;
  std::vector<c10::IValue> originals(args.size()), hosts(args.size());
  std::optional<c10::Device> target;
  for (size_t i = 0; i < args.size(); ++i) {
    auto& iv = (*stack)[begin + i];
    originals[i] = iv;
    if (iv.isTensor()) {
      const auto& t = iv.toTensor();
      if (t.defined() && t.is_privateuseone()) {
        target = t.device();
        iv = views.host(t);
        hosts[i] = iv;
      }
    } else if (iv.isTensorList()) {
      c10::List<at::Tensor> host;
      for (const at::Tensor& t : iv.toTensorVector()) {
        if (t.defined() && t.is_privateuseone()) target = t.device();
        host.push_back(t.defined() && t.is_privateuseone() ? views.host(t) : t);
      }
      iv = host;
    } else if (iv.isOptionalTensorList()) {
      c10::List<std::optional<at::Tensor>> host;
      for (const auto& t : iv.toOptionalTensorVector()) {
        if (t && t->defined() && t->is_privateuseone()) {
          target = t->device();
          host.push_back(views.host(*t));
        } else {
          host.push_back(t);
        }
      }
      iv = host;
    } else if (iv.isDevice() && iv.toDevice().is_privateuseone()) {
      target = iv.toDevice();
      iv = c10::Device(at::kCPU);
    }
  }
  if (target) {
    for (const auto& iv : originals) {
      if (iv.isTensor()) check_same_device(iv.toTensor(), op);
      else if (iv.isTensorList()) for (const at::Tensor& t : iv.toTensorVector()) check_same_device(t, op);
    }
  }

  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);

  // A kernel may restride a mutated argument in place (e.g. resize_ to the same bytes): mirror it.
  for (size_t i = 0; i < args.size(); ++i) {
    if (!hosts[i].isTensor() || !args[i].alias_info() || !args[i].alias_info()->isWrite()) continue;
    const at::Tensor& h = hosts[i].toTensor();
    const at::Tensor& n = originals[i].toTensor();
    if (h.sizes() != n.sizes() || h.strides() != n.strides() || h.storage_offset() != n.storage_offset()) {
      n.unsafeGetTensorImpl()->set_sizes_and_strides(h.sizes(), h.strides(), h.storage_offset());
    }
  }

  const auto& rets = schema.returns();
  const size_t rbegin = stack->size() - rets.size();
  auto to_neuron = [&](const at::Tensor& t, bool is_view) -> at::Tensor {
    if (!t.defined() || !t.is_cpu() || !target) return t;
    if (is_view && views.owns(t)) return views.neuron_view(t);
    // Fresh result (or a non-view result aliasing an input, which must not alias): copy it to the device, keeping its layout when dense.
    at::Tensor out = t.is_non_overlapping_and_dense()
        ? at::empty_strided(t.sizes(), t.strides(), t.options().device(*target))
        : at::empty(t.sizes(), t.options().device(*target));
    at::Tensor host_out = views.host(out);
    at::native::copy_(host_out, t, false);
    return out;
  };
  for (size_t j = 0; j < rets.size(); ++j) {
    auto& rv = (*stack)[rbegin + j];
    const c10::AliasInfo* ai = rets[j].alias_info();
    if (ai && ai->isWrite()) {  // in-place/mutating op: hand back the original argument
      for (size_t i = 0; i < args.size(); ++i) {
        const c10::AliasInfo* ia = args[i].alias_info();
        if (ia && *ia == *ai) { rv = originals[i]; break; }
      }
    } else if (rv.isTensor()) {
      rv = to_neuron(rv.toTensor(), ai != nullptr);
    } else if (rv.isTensorList()) {
      c10::List<at::Tensor> out;
      for (const at::Tensor& t : rv.toTensorVector()) out.push_back(to_neuron(t, ai != nullptr));
      rv = out;
    }
  }
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("as_strided", as_strided);
  m.impl("view", view);
  m.impl("view.dtype", view_dtype);
  m.impl("_reshape_alias", reshape_alias);
  m.impl("resize_", resize_);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("set_.source_Storage_storage_offset", set_storage);
  m.impl("set_.source_Storage", set_source_storage);
  m.impl("set_.source_Tensor", set_source_tensor);
  m.impl("set_", set_empty);
  m.impl("record_stream", record_stream);
}

// Every aten op with a CPU kernel gets the fallback as its neuron kernel, so a neuron op runs the
// very kernel the CPU runs. Without this, a composite kernel outranks a backend fallback:
// structured ops (add.Tensor...) would reach the backend only through their out= variant,
// and some would decompose differently from the CPU (math_native_layer_norm, math
// silu_backward), breaking bit-for-bit parity.
static bool g_cpu_ops_routed = [] {
  static auto* lib = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) continue;
    auto op = dispatcher.findOp(name);
    if (!op || !op->hasKernelForDispatchKey(c10::DispatchKey::CPU) ||
        op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) {
      continue;
    }
    std::string n = name.name.substr(6) + (name.overload_name.empty() ? "" : "." + name.overload_name);
    lib->impl(n.c_str(), torch::CppFunction::makeFromBoxedFunction<&neuron_fallback>());
  }
  return true;
}();

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&neuron_fallback>());
}

// -------------------------------------------------------------- autocast --
// torch.autocast("neuron", dtype=torch.bfloat16): CUDA's policy, from ATen's shared op lists.

}  // namespace neuron
namespace at::autocast {  // the KERNEL_* macros expect this scope
#define ADD_NS(RAW_OP) at::RAW_OP
#define _KERNEL_NEURON_LOW_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define _KERNEL_NEURON_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define _KERNEL_NEURON_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define _KERNEL_NEURON_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  AT_FORALL_LOWER_PRECISION_FP(_KERNEL_NEURON_LOW_PRECISION_FP)
  AT_FORALL_FP32(_KERNEL_NEURON_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(_KERNEL_NEURON_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(_KERNEL_NEURON_PROMOTE)
}
// torch registers no AutocastPrivateUse1 fallback: ops without a policy pass through.
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }
}  // namespace at::autocast
namespace neuron {

// --------------------------------------------- runtime ops for the Python side --

TORCH_LIBRARY(neuron_rt, m) {
  m.def("init() -> ()", [] { reserve_cores(); });
  m.def("is_initialized() -> bool", [] { return g_initialized.load(); });
  m.def("visible_cores() -> str", [] { return visible_cores_spec(); });
  m.def("memory_cap() -> int", [] { return memory_cap(); });
  m.def("device_count() -> int", [] { return int64_t(ownership().count); });
  m.def("device_index() -> int", [] { return int64_t(ownership().index); });
  m.def("device_rule() -> str", [] { return ownership().rule; });
  // CPU tensor sharing a neuron tensor's memory (kept alive by it): lets gloo
  // run collectives in place. Internal: not a substitute for .cpu().
  m.def("host_alias(Tensor self) -> Tensor", [](const at::Tensor& t) {
    if (!t.is_privateuseone()) return t;
    check_dtype(t.scalar_type());
    auto* keep = new c10::Storage(t.storage());
    c10::Storage cpu(c10::Storage::use_byte_size_t(), keep->nbytes(),
                     at::DataPtr(keep->mutable_data(), keep, [](void* p) { delete static_cast<c10::Storage*>(p); },
                                 at::Device(at::kCPU)));
    auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(cpu), c10::DispatchKeySet(c10::DispatchKey::CPU),
                                                     t.dtype());
    impl->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
    return at::Tensor(std::move(impl));
  });
}

}  // namespace neuron

// A stand-in for a libtorch that carries its own Gloo: this library exports
// functions under the mangled names of the Gloo functions ddp calls, with
// behaviour no caller survives (they abort). Loaded before ddp, it is first
// in the process's symbol scope, as libtorch_cpu.so (with its bundled Gloo)
// is before libgloo.so in a program on pytorch.org's or pip's libtorch.
//
// Only functions that libgloo does not call itself are faked: on Debian,
// libtorch links libgloo.so, which is therefore loaded with the program and
// binds its internal calls in the global scope, where ddp cannot reach.
// (Where libtorch bundles Gloo, libgloo.so is loaded by ddp's module alone,
// with the module's isolation.)
#include <cstdlib>
#include <unistd.h>

#define FAKE(id, mangled)                                                       \
  extern "C" __attribute__((visibility("default"))) void id() __asm__(mangled); \
  extern "C" void id() {                                                        \
    const char message[] = "fake Gloo called: " mangled "\n";                   \
    (void)!write(2, message, sizeof message - 1);                               \
    std::abort();                                                               \
  }

// gloo::rendezvous::Context::Context(int, int, int)
FAKE(fake_context_ctor, "_ZN4gloo10rendezvous7ContextC1Eiii")
// gloo::rendezvous::Context::connectFullMesh(Store&, std::shared_ptr<Device>&)
FAKE(fake_connect_full_mesh,
     "_ZN4gloo10rendezvous7Context15connectFullMeshERNS0_5StoreERSt10shared_ptrINS_"
     "9transport6DeviceEE")
// gloo::transport::tcp::CreateDevice(const attr&)
FAKE(fake_create_device, "_ZN4gloo9transport3tcp12CreateDeviceERKNS1_4attrE")
// gloo::allreduce(const AllreduceOptions&), broadcast, allgather, barrier
FAKE(fake_allreduce, "_ZN4gloo9allreduceERKNS_16AllreduceOptionsE")
FAKE(fake_broadcast, "_ZN4gloo9broadcastERNS_16BroadcastOptionsE")
FAKE(fake_allgather, "_ZN4gloo9allgatherERNS_16AllgatherOptionsE")
FAKE(fake_barrier, "_ZN4gloo7barrierERNS_14BarrierOptionsE")
// gloo::BarrierOptions::BarrierOptions(const std::shared_ptr<Context>&)
FAKE(fake_barrier_options, "_ZN4gloo14BarrierOptionsC1ERKSt10shared_ptrINS_7ContextEE")
// gloo::Context::closeConnections()
FAKE(fake_close_connections, "_ZN4gloo7Context16closeConnectionsEv")

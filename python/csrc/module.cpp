// The extension module ddp_torch._C: the backend's constructor, which
// ddp_torch/__init__.py registers with torch.distributed as "ddp".
#include "backend.h"
#include "completions.h"

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/utils/pybind.h>

#include <pybind11/chrono.h>

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  m.doc() = "ddp's collectives as a torch.distributed backend (ddp_torch)";
  // Its base, c10d::Backend, is torch._C._distributed_c10d.Backend: loaded
  // first, so that pybind11 knows it.
  py::module_::import("torch._C._distributed_c10d");
  py::class_<ddp_torch::Backend, c10d::Backend, c10::intrusive_ptr<ddp_torch::Backend>>(
      m, "Backend",
      "ddp's ProcessGroup as a torch.distributed backend; made by torch.distributed")
      .def(py::init<const c10::intrusive_ptr<c10d::Store>&, int, int,
                    std::chrono::milliseconds>(),
           py::arg("store"), py::arg("rank"), py::arg("world_size"), py::arg("timeout"),
           // Rendezvous blocks: other Python threads go on meanwhile.
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("ddp_backend", &ddp_torch::Backend::ddp_backend_name,
                             "the backend ddp chose: \"shm\", \"hierarchical(shm+gloo)\", ...");
  m.def(
      "_drain_completions",
      [](std::chrono::milliseconds timeout) {
        return ddp_torch::Completions::instance().drain(timeout);
      },
      py::arg("timeout"), py::call_guard<py::gil_scoped_release>(),
      "waits (at most timeout) until no future of a ddp Work is being completed; whether "
      "none is (ddp_torch calls it at exit)");
}

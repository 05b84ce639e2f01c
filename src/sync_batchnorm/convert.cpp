// convert_sync_batchnorm: swaps every BatchNorm{1,2,3}d of a module tree.
//
// libtorch modules reach their children three ways, and each needs its own
// swap: by name through the registry (replace_module), through a container's
// own list (Sequential keeps AnyModules, ModuleList and ModuleDict pointers:
// the container is rebuilt, or updated, in place so that its owners keep
// their pointer), or through a typed member field, which no library can
// retarget. The last is detected by counting references before anything
// changes, so a tree is converted completely or not at all.
#include <ddp/sync_batchnorm.h>

#include <ddp/errors.h>

#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/moduledict.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace ddp {
namespace {

using torch::nn::Module;

// A BatchNorm found in the tree, with the one reference this file holds.
struct Site {
  Module* parent;
  std::string name;  // in the parent
  std::string path;  // from the root, for errors
  std::shared_ptr<Module> old;
  int dims;  // 1, 2, 3
};

template <typename BN>
std::shared_ptr<SyncBatchNormImpl> sync_from(const BN& bn, int dims, ProcessGroupPtr group) {
  SyncBatchNormImpl::Adopted adopted{bn.weight, bn.bias, bn.running_mean, bn.running_var,
                                     bn.num_batches_tracked};
  auto sync =
      std::make_shared<SyncBatchNormImpl>(bn.options, std::move(group), dims, std::move(adopted));
  sync->train(bn.is_training());
  return sync;
}

int batchnorm_dims(const Module& m) {
  if (dynamic_cast<const torch::nn::BatchNorm1dImpl*>(&m)) return 1;
  if (dynamic_cast<const torch::nn::BatchNorm2dImpl*>(&m)) return 2;
  if (dynamic_cast<const torch::nn::BatchNorm3dImpl*>(&m)) return 3;
  return 0;
}

std::shared_ptr<SyncBatchNormImpl> sync_from(const Module& m, int dims, ProcessGroupPtr group) {
  switch (dims) {
    case 1:
      return sync_from(dynamic_cast<const torch::nn::BatchNorm1dImpl&>(m), 1, group);
    case 2:
      return sync_from(dynamic_cast<const torch::nn::BatchNorm2dImpl&>(m), 2, group);
    default:
      return sync_from(dynamic_cast<const torch::nn::BatchNorm3dImpl&>(m), 3, group);
  }
}

bool is_container(const Module& m) {
  return dynamic_cast<const torch::nn::SequentialImpl*>(&m) ||
         dynamic_cast<const torch::nn::ModuleListImpl*>(&m) ||
         dynamic_cast<const torch::nn::ModuleDictImpl*>(&m);
}

void collect(Module& parent, const std::string& prefix, std::vector<Site>& out) {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children;
  for (const auto& item : parent.named_children()) children.emplace_back(item.key(), item.value());
  for (auto& [name, child] : children) {
    const int dims = batchnorm_dims(*child);
    if (dims) {
      out.push_back(Site{&parent, name, prefix + name, std::move(child), dims});
    } else {
      collect(*child, prefix + name + ".", out);
    }
  }
}

// Rebuilding a container resets its own training flag: keep every flag.
struct TrainingFlags {
  explicit TrainingFlags(Module& root) : root_(root) {
    for (const auto& m : root.modules()) flags_.push_back(m->is_training());
  }
  void restore() {
    root_.train(flags_[0]);
    const auto mods = root_.modules();
    for (size_t i = 1; i < mods.size() && i < flags_.size(); ++i) mods[i]->train(flags_[i]);
  }
  Module& root_;
  std::vector<bool> flags_;
};

void replace_children(Module& parent,
                      const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& swaps) {
  const auto replacement = [&](const std::string& name) -> std::shared_ptr<Module> {
    for (const auto& s : swaps) {
      if (s.first == name) return s.second;
    }
    return nullptr;
  };
  if (auto* seq = dynamic_cast<torch::nn::SequentialImpl*>(&parent)) {
    TrainingFlags flags(parent);
    torch::nn::SequentialImpl fresh;
    const auto names = seq->named_children().keys();
    size_t i = 0;
    for (auto it = seq->begin(); it != seq->end(); ++it, ++i) {
      auto sync = replacement(names[i]);
      if (sync) {
        fresh.push_back(names[i], std::dynamic_pointer_cast<SyncBatchNormImpl>(sync));
      } else {
        fresh.push_back(names[i], *it);
      }
    }
    *seq = fresh;
    flags.restore();
  } else if (auto* list = dynamic_cast<torch::nn::ModuleListImpl*>(&parent)) {
    TrainingFlags flags(parent);
    torch::nn::ModuleListImpl fresh;
    size_t i = 0;
    for (auto it = list->begin(); it != list->end(); ++it, ++i) {
      auto sync = replacement(std::to_string(i));
      fresh.push_back(sync ? sync : *it);
    }
    *list = fresh;
    flags.restore();
  } else if (auto* dict = dynamic_cast<torch::nn::ModuleDictImpl*>(&parent)) {
    dict->update(swaps);
  } else {
    for (const auto& [name, sync] : swaps) parent.replace_module(name, sync);
  }
}

}  // namespace

std::shared_ptr<Module> convert_sync_batchnorm(const std::shared_ptr<Module>& module,
                                               ProcessGroupPtr process_group) {
  if (!module) {
    throw InvalidArgument(ErrorContext{-1, 0, "", "convert_sync_batchnorm", {}},
                          "the module is null");
  }
  if (const int dims = batchnorm_dims(*module)) return sync_from(*module, dims, process_group);

  std::vector<Site> sites;
  collect(*module, "", sites);
  for (const Site& s : sites) {
    // This file's reference, the parent's registry, and a container's list.
    const long expected = 2 + (is_container(*s.parent) ? 1 : 0);
    if (s.old.use_count() > expected) {
      throw InvalidArgument(
          ErrorContext{-1, 0, "", "convert_sync_batchnorm", {}},
          "'" + s.path + "' (torch::nn::BatchNorm" + std::to_string(s.dims) +
              "d) is also held outside its parent's registry, most likely "
              "by a member field that forward() calls; swapping the registered child would leave "
              "that field running unsynchronized. Declare the field as ddp::SyncBatchNorm" +
              std::to_string(s.dims) +
              "d (same BatchNormOptions) or torch::nn::AnyModule, or drop "
              "other references before converting. Nothing was converted.");
    }
  }
  // Replace parent by parent, in the order found.
  std::vector<Module*> parents;
  for (const Site& s : sites) {
    if (std::find(parents.begin(), parents.end(), s.parent) == parents.end()) {
      parents.push_back(s.parent);
    }
  }
  for (Module* parent : parents) {
    std::vector<std::pair<std::string, std::shared_ptr<Module>>> swaps;
    for (const Site& s : sites) {
      if (s.parent == parent) swaps.emplace_back(s.name, sync_from(*s.old, s.dims, process_group));
    }
    replace_children(*parent, swaps);
  }
  return module;
}

}  // namespace ddp

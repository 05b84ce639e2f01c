// libddp runs only in a process with one libtorch: the one it was built and
// linked against. A program that links libddp and another libtorch crashes
// inside the dynamic loader, in the two libtorchs' static initialisers,
// before any of libddp's code runs: the CMake package refuses to build such
// a program (cmake/ddpTorch.cmake). What can still happen at run time is a
// second libtorch loaded later, by dlopen (a plugin, an embedded
// interpreter's extension): the first tensor that crosses between the two
// crashes. This is the check for that, where a group is made.
#pragma once

#include <string>
#include <vector>

namespace ddp::compat {

// The files of libtorch's core libraries (libc10, libtorch_cpu) loaded in
// this process, each as its real path, in load order.
std::vector<std::string> loaded_libtorch_files();

// The file libddp's own calls into libc10 resolve to.
std::string own_libc10_file();

// Throws InvalidArgument naming both libtorchs and what to do when this
// process has loaded a libtorch other than libddp's. The files are read once
// (a libtorch loaded later with dlopen is not seen). Called where a process
// group is made, before any collective.
void check_one_libtorch();

// The folders of `files` other than `own`'s folder: the other libtorchs.
// Pure, for the test.
std::vector<std::string> other_libtorch_folders(const std::vector<std::string>& files,
                                                const std::string& own);

}  // namespace ddp::compat

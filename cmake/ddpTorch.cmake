# The libtorch libddp is built against, recorded at ddp's build and found
# again by its CMake package. Installed beside ddpConfig.cmake; defines
# macros only.
#
# A program that links libddp and another libtorch links two libtorchs and
# crashes. So the package records the libtorch ddp was built against
# (ddp_TORCH_VERSION, ddp_TORCH_CXX11_ABI, ddp_TORCH_FLAVOUR, ddp_TORCH_DIR in
# ddpConfig.cmake) and _ddp_find_torch() accepts no other.

# <prefix>_VERSION, <prefix>_CXX11_ABI (1 or 0) and <prefix>_FLAVOUR (CUDA or
# CPU) of the libtorch that find_package(Torch) found.
macro(_ddp_torch_facts prefix)
  set(${prefix}_VERSION "${Torch_VERSION}")
  # libtorch >= 2.7 is built with the C++11 ABI only and no longer says so in
  # TORCH_CXX_FLAGS; older ones say it there.
  if(TORCH_CXX_FLAGS MATCHES "_GLIBCXX_USE_CXX11_ABI=([01])")
    set(${prefix}_CXX11_ABI "${CMAKE_MATCH_1}")
  else()
    set(${prefix}_CXX11_ABI 1)
  endif()
  if(TARGET c10_cuda)
    set(${prefix}_FLAVOUR CUDA)
  else()
    set(${prefix}_FLAVOUR CPU)
  endif()
endmacro()

# Finds Torch as the recorded one. Leaves Torch found (its targets and
# variables, as find_package(Torch) leaves them), or sets ddp_FOUND FALSE and
# ddp_NOT_FOUND_MESSAGE (what was found, what is needed, what to do), with
# which find_package(ddp REQUIRED) stops the configure.
#
# Which libtorch, first to last: a Torch the project found itself before
# find_package(ddp); the project's Torch_DIR; a libtorch under its Torch_ROOT
# or CMAKE_PREFIX_PATH; the recorded folder (so that, pointed at nothing, a
# project finds that one and not a system libtorch such as Debian's); then
# CMake's usual places. What is found must have the recorded version, C++ ABI
# and flavour: another install of the same libtorch (a relocated pip wheel
# or pytorch.org zip) is accepted.
macro(_ddp_find_torch)
  if(NOT TARGET torch)
    _ddp_choose_torch_dir()
    find_package(Torch QUIET)
  endif()
  set(_ddp_built_against "libtorch ${ddp_TORCH_VERSION} (${ddp_TORCH_FLAVOUR}, C++11 ABI \
${ddp_TORCH_CXX11_ABI}) from ${ddp_TORCH_DIR}")
  set(_ddp_remedy "Point CMake at the libtorch ddp was built against: -DTorch_DIR=<its \
share/cmake/Torch folder> (at ddp's build: ${ddp_TORCH_DIR}) or -DCMAKE_PREFIX_PATH=<its \
install prefix> (pip's torch: the folder `python -c 'import torch; print(torch.__path__[0])'` \
prints); or build ddp against the libtorch this project uses.")
  if(TARGET torch)
    _ddp_mixed_caffe2_check()
    _ddp_torch_facts(_ddp_found)
  endif()
  if(NOT TARGET torch)
    set(ddp_FOUND FALSE)
    set(ddp_NOT_FOUND_MESSAGE "ddp ${ddp_VERSION} needs the ${_ddp_built_against}, and CMake \
found no libtorch. ${_ddp_remedy}")
  elseif(_ddp_mixed)
    set(ddp_FOUND FALSE)
    set(ddp_NOT_FOUND_MESSAGE "CMake found libtorch in ${Torch_DIR} but its Caffe2 package \
(the targets torch, torch_cpu, c10) in ${Caffe2_DIR}, another libtorch's: a program that links \
both crashes. Set -DCaffe2_DIR=${_ddp_own_caffe2} (find_package(Torch) looks for Caffe2 in the \
system's folders before its own).")
  elseif(NOT _ddp_found_VERSION STREQUAL ddp_TORCH_VERSION
         OR NOT _ddp_found_CXX11_ABI STREQUAL ddp_TORCH_CXX11_ABI
         OR NOT _ddp_found_FLAVOUR STREQUAL ddp_TORCH_FLAVOUR)
    set(ddp_FOUND FALSE)
    set(ddp_NOT_FOUND_MESSAGE "ddp ${ddp_VERSION} was built against ${_ddp_built_against}, \
but CMake found libtorch ${_ddp_found_VERSION} (${_ddp_found_FLAVOUR}, C++11 ABI \
${_ddp_found_CXX11_ABI}) in ${Torch_DIR}: a program that links both crashes. ${_ddp_remedy}")
  else()
    _ddp_own_torch_libraries()
  endif()
endmacro()

# Whether the Caffe2 package found (Caffe2_DIR) is not the one beside the
# Torch package found (Torch_DIR), which _ddp_own_caffe2 then names. (A
# function, for if(): its result in _ddp_mixed.)
function(_ddp_mixed_caffe2_check)
  get_filename_component(own "${Torch_DIR}/../Caffe2" REALPATH)
  get_filename_component(found "${Caffe2_DIR}" REALPATH)
  set(_ddp_own_caffe2 "${own}" PARENT_SCOPE)
  if(Caffe2_DIR AND EXISTS "${own}/Caffe2Config.cmake" AND NOT own STREQUAL found)
    set(_ddp_mixed TRUE PARENT_SCOPE)
  else()
    set(_ddp_mixed FALSE PARENT_SCOPE)
  endif()
endfunction()

# Sets Torch_DIR to the libtorch _ddp_find_torch() takes (its order above),
# and Caffe2_DIR to the Caffe2 package beside it. TorchConfig.cmake looks for
# Caffe2 (which defines the targets torch, torch_cpu, c10) with
# find_package(Caffe2 PATHS <beside it>), and PATHS come after the system's
# folders: pointed at pip's libtorch by Torch_DIR alone, it took Debian's
# Caffe2, and the program linked both libtorchs.
macro(_ddp_choose_torch_dir)
  if(NOT Torch_DIR OR NOT EXISTS "${Torch_DIR}/TorchConfig.cmake")
    set(_ddp_prefixes ${Torch_ROOT} $ENV{Torch_ROOT} ${CMAKE_PREFIX_PATH})
    string(REPLACE ":" ";" _ddp_env_prefixes "$ENV{CMAKE_PREFIX_PATH}")
    list(APPEND _ddp_prefixes ${_ddp_env_prefixes})
    set(_ddp_chosen "")
    foreach(_ddp_prefix IN LISTS _ddp_prefixes)
      foreach(_ddp_suffix IN ITEMS "" share/cmake/Torch lib/cmake/Torch
                                   lib/${CMAKE_LIBRARY_ARCHITECTURE}/cmake/Torch)
        if(NOT _ddp_chosen AND EXISTS "${_ddp_prefix}/${_ddp_suffix}/TorchConfig.cmake")
          set(_ddp_chosen "${_ddp_prefix}/${_ddp_suffix}")
        endif()
      endforeach()
    endforeach()
    if(NOT _ddp_chosen AND EXISTS "${ddp_TORCH_DIR}/TorchConfig.cmake")
      set(_ddp_chosen "${ddp_TORCH_DIR}")
    endif()
    if(_ddp_chosen)
      cmake_path(NORMAL_PATH _ddp_chosen)
      set(Torch_DIR "${_ddp_chosen}" CACHE PATH "The directory containing TorchConfig.cmake" FORCE)
    endif()
  endif()
  if(Torch_DIR AND NOT Caffe2_DIR AND EXISTS "${Torch_DIR}/../Caffe2/Caffe2Config.cmake")
    get_filename_component(_ddp_caffe2 "${Torch_DIR}/../Caffe2" ABSOLUTE)
    set(Caffe2_DIR "${_ddp_caffe2}" CACHE PATH "The directory containing Caffe2Config.cmake")
  endif()
endmacro()

# TorchConfig.cmake looks for some of its libraries (c10, c10_cuda, kineto)
# with find_library, which searches the system's folders before libtorch's
# own: pointed at one libtorch by Torch_DIR alone, it can take another's
# libc10.so from there, and ${TORCH_LIBRARIES} then mixes two libtorchs. Each
# such library is taken from the found libtorch's lib/ instead.
macro(_ddp_own_torch_libraries)
  foreach(_ddp_var IN ITEMS c10_LIBRARY C10_CUDA_LIBRARY kineto_LIBRARY TORCH_LIBRARY)
    set(_ddp_path "${${_ddp_var}}")
    if(NOT _ddp_path)
      continue()
    endif()
    cmake_path(IS_PREFIX TORCH_INSTALL_PREFIX "${_ddp_path}" NORMALIZE _ddp_inside)
    get_filename_component(_ddp_name "${_ddp_path}" NAME)
    set(_ddp_own "${TORCH_INSTALL_PREFIX}/lib/${_ddp_name}")
    if(_ddp_inside OR NOT EXISTS "${_ddp_own}")
      continue()
    endif()
    set(${_ddp_var} "${_ddp_own}" CACHE FILEPATH "" FORCE)
    set(_ddp_libraries "")
    foreach(_ddp_library IN LISTS TORCH_LIBRARIES)
      if(_ddp_library STREQUAL _ddp_path)
        set(_ddp_library "${_ddp_own}")
      endif()
      list(APPEND _ddp_libraries "${_ddp_library}")
    endforeach()
    set(TORCH_LIBRARIES "${_ddp_libraries}")
  endforeach()
endmacro()

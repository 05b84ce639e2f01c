# The Gloo backend's engine: every call into Gloo, in the module
# libddp_gloo.so, which libddp loads beside itself with RTLD_DEEPBIND so that
# it binds to this libgloo even where libtorch carries (and exports) its own
# Gloo; see src/collectives/gloo/module.cpp and docs/architecture.md. libgloo
# is the module's first dependency: it leads the module's own symbol scope.
#
# Where the module cannot be built safely, it is not built: libddp then
# refuses the gloo backend with DDP_GLOO_UNAVAILABLE as the reason, naming
# the backends that need no Gloo.
set(DDP_GLOO_UNAVAILABLE "")
if(NOT Gloo_FOUND)
  set(DDP_GLOO_UNAVAILABLE
      "this build of ddp found no Gloo (Debian: libgloo-dev, which scripts/install-deps.sh installs)")
elseif(TORCH_CXX_FLAGS MATCHES "_GLIBCXX_USE_CXX11_ABI=0")
  # std::string crosses between the module and libgloo (gloo::transport::tcp::attr).
  set(DDP_GLOO_UNAVAILABLE
      "this build's libtorch uses the pre-C++11 std::string ABI, which the system's libgloo "
      "cannot share; build ddp against a cxx11-ABI libtorch (pytorch.org's cxx11 zip, or pip's "
      ">= 2.7) for Gloo")
endif()

if(DDP_GLOO_UNAVAILABLE)
  message(WARNING "ddp: the gloo backend is not built: ${DDP_GLOO_UNAVAILABLE}")
  set_property(SOURCE src/collectives/gloo/module.cpp APPEND PROPERTY COMPILE_DEFINITIONS
               "DDP_GLOO_UNAVAILABLE=\"${DDP_GLOO_UNAVAILABLE}\"")
  return()
endif()

add_library(ddp_gloo MODULE
  src/collectives/gloo/gloo.cpp
  src/collectives/gloo/collectives.cpp
  src/collectives/gloo/store_adapter.cpp
  src/collectives/gloo/entry.cpp)
target_link_libraries(ddp_gloo PRIVATE gloo ddp torch ${CMAKE_DL_LIBS})
target_include_directories(ddp_gloo PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_options(ddp_gloo PRIVATE -Wall -Wextra)
if(DDP_THREAD_SAFETY_ANALYSIS)
  target_compile_options(ddp_gloo PRIVATE -Wthread-safety -Werror)
endif()
set_target_properties(ddp_gloo PROPERTIES PREFIX lib LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}
                                          INSTALL_RPATH_USE_LINK_PATH ON)
set_property(SOURCE src/collectives/gloo/entry.cpp APPEND PROPERTY COMPILE_DEFINITIONS
             "DDP_GLOO_SONAME=\"$<TARGET_SONAME_FILE_NAME:gloo>\"")
# Both sides of engine.h must come from one build (checked at load).
set(DDP_GLOO_BUILD_ID "ddp ${PROJECT_VERSION}, libtorch ${Torch_VERSION}, gloo ${Gloo_VERSION}")
set_property(SOURCE src/collectives/gloo/module.cpp src/collectives/gloo/entry.cpp APPEND
             PROPERTY COMPILE_DEFINITIONS "DDP_GLOO_BUILD_ID=\"${DDP_GLOO_BUILD_ID}\"")
# Users of ddp::ddp in this tree get the module built before they run.
add_dependencies(ddp_in_tree ddp_gloo)
install(TARGETS ddp_gloo LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})

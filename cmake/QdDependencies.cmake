# Third-party dependencies, all from Debian 12 packages (scripts/install-deps.sh).
find_package(absl CONFIG REQUIRED)
find_package(fmt CONFIG REQUIRED)

# LLVM 19 through its CMake config; we always link the single shared libLLVM.
find_package(LLVM 19.1 CONFIG REQUIRED
  HINTS /usr/lib/llvm-19/lib/cmake/llvm /usr/lib/llvm-19)
message(STATUS "qd: LLVM ${LLVM_PACKAGE_VERSION} from ${LLVM_DIR}")
if(NOT TARGET LLVM)
  message(FATAL_ERROR "qd needs the shared libLLVM (target 'LLVM'); install llvm-19-dev")
endif()
# qd_llvm: what the build links for LLVM (headers, definitions, the shared
# library). It is not installed: qd_link_llvm (QdTarget.cmake) links it into
# qd's libraries, and the installed package finds LLVM's shared library anew
# on the consumer's machine (cmake/qdConfig.cmake.in).
add_library(qd_llvm INTERFACE)
target_include_directories(qd_llvm SYSTEM INTERFACE ${LLVM_INCLUDE_DIRS})
target_compile_definitions(qd_llvm INTERFACE ${LLVM_DEFINITIONS})
target_link_libraries(qd_llvm INTERFACE LLVM)
set(QD_LLVM_TOOLS_DIR ${LLVM_TOOLS_BINARY_DIR})

# Boost.Graph is header-only; only qd::analysis uses it, privately.
find_package(Boost 1.74 REQUIRED)

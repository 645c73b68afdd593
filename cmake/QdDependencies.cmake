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
add_library(qd_llvm INTERFACE)
target_include_directories(qd_llvm SYSTEM INTERFACE ${LLVM_INCLUDE_DIRS})
target_compile_definitions(qd_llvm INTERFACE ${LLVM_DEFINITIONS})
# The build links LLVM's own target; the installed package names the shared
# library by its path instead, so a consumer does not load LLVM's CMake
# config (which runs C-language checks and so fails in a project that only
# enables CXX).
find_library(QD_LLVM_SHARED_LIBRARY NAMES LLVM-${LLVM_VERSION_MAJOR} LLVM
  HINTS ${LLVM_LIBRARY_DIR} NO_DEFAULT_PATH REQUIRED)
target_link_libraries(qd_llvm INTERFACE $<BUILD_INTERFACE:LLVM>
                                        $<INSTALL_INTERFACE:${QD_LLVM_SHARED_LIBRARY}>)
# Exported (as qd::llvm) so that installed static qd libraries that use LLVM
# link it.
set_target_properties(qd_llvm PROPERTIES EXPORT_NAME llvm)
set_property(GLOBAL APPEND PROPERTY QD_EXPORTED_TARGETS qd_llvm)
set(QD_LLVM_TOOLS_DIR ${LLVM_TOOLS_BINARY_DIR})

# Boost.Graph is header-only; only qd::analysis uses it, privately.
find_package(Boost 1.74 REQUIRED)

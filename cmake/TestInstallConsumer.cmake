# Installs qd from QD_BUILD_DIR, checks that the package is relocatable,
# moves it to another prefix and builds consumers against it there:
# examples/consumer (all of it, then its CPU part without SPIRV-Tools), the
# installed front-end example and the installed Python package. Run with
# cmake -P; QD_FORBIDDEN_PATHS ('|'-separated) are directories of this
# machine the package must not name (dependencies' that the package's config
# finds anew), QD_BACKENDS ('|'-separated) the backends of the build,
# QD_PYTHON the Python that runs the Python package (empty: not run).
cmake_policy(VERSION 3.25)
set(staging ${QD_WORK_DIR}/staging)
set(prefix ${QD_WORK_DIR}/prefix)
set(consumer_build ${QD_WORK_DIR}/build)
file(REMOVE_RECURSE ${QD_WORK_DIR})
string(REPLACE "|" ";" forbidden "${QD_FORBIDDEN_PATHS}")
string(REPLACE "|" ";" backends "${QD_BACKENDS}")

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

# Fails unless `text` (what `what` printed) contains every one of ARGN.
function(expect_output what text)
  foreach(want IN LISTS ARGN)
    string(FIND "${text}" "${want}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "${what} did not print '${want}'; it printed:\n${text}")
    endif()
  endforeach()
endfunction()

# Configures `source` against the prefix into `build` with extra ARGN.
function(configure_consumer what source build)
  run_step("configure ${what}" ${CMAKE_COMMAND} -S ${source} -B ${build} -G ${CMAKE_GENERATOR}
           -DCMAKE_PREFIX_PATH=${prefix} ${ARGN})
  set(step_output "${step_output}" PARENT_SCOPE)
endfunction()

run_step("install" ${CMAKE_COMMAND} --install ${QD_BUILD_DIR} --prefix ${staging})

# The package names no directory of this machine: not the build, source or
# install directory, not the dependencies' (a targets file names no absolute
# path at all: qd's own files are relative to it).
file(GLOB package_files ${staging}/lib/cmake/qd/*.cmake)
list(APPEND forbidden ${QD_BUILD_DIR} ${QD_SOURCE_DIR} ${staging})
set(exported "qd::llvm") # created by qdConfig.cmake, not by a targets file
foreach(file IN LISTS package_files)
  file(READ ${file} text)
  foreach(dir IN LISTS forbidden)
    string(FIND "${text}" "${dir}" at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "${file} names ${dir}, a directory of the machine qd was built on")
    endif()
  endforeach()
  get_filename_component(name ${file} NAME)
  if(name MATCHES "^qd.*Targets")
    if(text MATCHES "[\";](/[^\";]+)")
      message(FATAL_ERROR "${file} names the absolute path ${CMAKE_MATCH_1}")
    endif()
    if(text MATCHES "_cmake_expected_target IN ITEMS ([^)]*)\\)")
      string(REPLACE " " ";" targets "${CMAKE_MATCH_1}")
      list(APPEND exported ${targets})
    endif()
  endif()
endforeach()
# Every library of the build is exported: the core ones always, a
# backend's where the build enabled it (QD_ENABLE_* of its cache).
set(expected qd::ir qd::sizeexpr qd::analysis qd::abi qd::transforms qd::interp qd::check
    qd::codegen qd::codegen_llvm qd::runtime qd::runtime_cpu qd::backends qd::llvm qd::c)
file(STRINGS ${QD_BUILD_DIR}/CMakeCache.txt enabled REGEX "^QD_ENABLE_(CUDA|HIP|VULKAN):BOOL=ON")
if(enabled MATCHES "CUDA")
  list(APPEND expected qd::runtime_cuda qd::runtime_gpu qd::runtime_accel)
endif()
if(enabled MATCHES "HIP")
  list(APPEND expected qd::runtime_hip qd::runtime_gpu qd::runtime_accel)
endif()
if(enabled MATCHES "VULKAN")
  list(APPEND expected qd::runtime_vulkan qd::codegen_spirv qd::runtime_accel)
endif()
foreach(target IN LISTS expected)
  if(NOT target IN_LIST exported)
    message(FATAL_ERROR "the package does not export ${target}; it exports ${exported}")
  endif()
endforeach()

# README.md names every exported target.
file(READ ${QD_SOURCE_DIR}/README.md readme)
foreach(target IN LISTS exported)
  if(NOT readme MATCHES "${target}[^a-z_]")
    message(FATAL_ERROR "README.md does not name ${target}, which the package exports")
  endif()
endforeach()

# Relocation: the package works from wherever it is copied to.
file(COPY ${staging}/ DESTINATION ${prefix})
file(REMOVE_RECURSE ${staging})

configure_consumer("consumer" ${QD_SOURCE_DIR}/examples/consumer ${consumer_build})
run_step("build consumer" ${CMAKE_COMMAND} --build ${consumer_build})
run_step("run consumer" ${consumer_build}/qd-consumer)
expect_output(qd-consumer "${step_output}" "kernel @sum_sin()" "%s = sin %xi : f32"
              "atomic_add @y[], %r : f32")
run_step("run the transforms consumer" ${consumer_build}/qd-consumer-transforms)
expect_output(qd-consumer-transforms "${step_output}" "kernel @k_grad()")
run_step("run the CPU backend consumer" ${consumer_build}/qd-consumer-cpu)
expect_output(qd-consumer-cpu "${step_output}" "y = 1 3 5 7 9 11 13 15")
run_step("run the registry consumer" ${consumer_build}/qd-consumer-registry)
expect_output(qd-consumer-registry "${step_output}" "backends: interp cpu" "x = 0 1 4 9")
run_step("run the C API consumer" ${consumer_build}/qd-consumer-capi)
expect_output(qd-consumer-capi "${step_output}" "qd 0.3.0: y = 2 4 6")

# The Python package, from where the package installs it, finds the
# library next to it (no QD_C_LIBRARY, no build tree) and runs a kernel
# (QD_PYTHON is empty in sanitized builds).
if(QD_PYTHON)
  run_step("run the installed Python package" ${CMAKE_COMMAND} -E env --unset=QD_C_LIBRARY
    --unset=QD_LIBRARY_DIR QD_BUILD_DIR=${QD_WORK_DIR}/none PYTHONPATH=${prefix}/lib/python
    ${QD_PYTHON} -c "import qd
m = qd.Module.parse('field @r : i32\\nkernel @k(%n: i32) {\\n  serial {\\n    store @r[], %n\\n  }\\n}\\n')
p = m.program(qd.backend('cpu'))
p.kernel('k')(n=42)
print(qd.version(), qd._lib.lib._name, int(p.field('r').numpy()))")
  expect_output("the installed Python package" "${step_output}"
                "0.3.0 ${prefix}/lib/libqd-c.so 42")
endif()

# The front-end example, from where the package installs it, on two
# backends picked by name: loss = 0.25 * (1 + 4 + 9 + 16 + 25 + 36) and
# x.grad = 2 * 0.25 * x.
set(frontend_build ${QD_WORK_DIR}/frontend)
configure_consumer("the front-end example" ${prefix}/share/qd/examples/frontend ${frontend_build})
run_step("build the front-end example" ${CMAKE_COMMAND} --build ${frontend_build})
foreach(backend cpu interp)
  run_step("run the front-end example on ${backend}" ${frontend_build}/qd-frontend ${backend})
  expect_output("qd-frontend ${backend}" "${step_output}"
    "parallel for (%i, %j) = (0, 0) to (%rows, %cols) {"
    "@energy_grad adds into %x.grad, reads %loss.grad"
    "loss = 22.75\nloss = 22.75\nx.grad = 0.5 1 1.5 2 2.5 3\n"
    "row_sums rejected:\nmodel.py:10:18: error: '%x' has 2 dimensions but 1 index was given")
endforeach()

# A consumer of the CPU backend alone configures and builds where
# SPIRV-Tools cannot be found; qd::backends, optional there, is left out
# when it needs SPIRV-Tools (Vulkan).
set(cpu_build ${QD_WORK_DIR}/build-cpu-only)
configure_consumer("the CPU-only consumer" ${QD_SOURCE_DIR}/examples/consumer ${cpu_build}
                   -DCMAKE_DISABLE_FIND_PACKAGE_SPIRV-Tools-opt=ON)
if("vulkan" IN_LIST backends)
  expect_output("configuring the CPU-only consumer" "${step_output}"
                "optional component backends not loaded: SPIRV-Tools-opt")
endif()
run_step("build the CPU-only consumer" ${CMAKE_COMMAND} --build ${cpu_build} --target qd-consumer-cpu)
run_step("run the CPU-only consumer" ${cpu_build}/qd-consumer-cpu)
expect_output(qd-consumer-cpu "${step_output}" "y = 1 3 5 7 9 11 13 15")

# Asking for a component that cannot load fails, saying why and what to do.
set(probe ${QD_WORK_DIR}/probe)
file(WRITE ${probe}/CMakeLists.txt "cmake_minimum_required(VERSION 3.25)
project(probe LANGUAGES CXX)
find_package(qd CONFIG REQUIRED COMPONENTS \${COMPONENT})\n")
function(expect_component_error component want)
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${probe} -B ${probe}/build-${component}
                  -DCMAKE_PREFIX_PATH=${prefix} -DCOMPONENT=${component} ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 0)
    message(FATAL_ERROR "find_package(qd COMPONENTS ${component}) succeeded:\n${out}")
  endif()
  string(REGEX REPLACE "[ \n]+" " " err "${err}")
  expect_output("find_package(qd COMPONENTS ${component})" "${err}" "${want}")
endfunction()
expect_component_error(metal "component metal: this qd has no such component (it has: core cpu")
if("vulkan" IN_LIST backends)
  expect_component_error(vulkan "component vulkan: SPIRV-Tools-opt (its CMake config) was not found"
                         -DCMAKE_DISABLE_FIND_PACKAGE_SPIRV-Tools-opt=ON)
endif()

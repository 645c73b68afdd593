# Installs qd from QD_BUILD_DIR into a fresh prefix, then configures, builds
# and runs examples/consumer against it. Run with cmake -P.
set(prefix ${QD_WORK_DIR}/prefix)
set(consumer_build ${QD_WORK_DIR}/build)
file(REMOVE_RECURSE ${QD_WORK_DIR})

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

run_step("install" ${CMAKE_COMMAND} --install ${QD_BUILD_DIR} --prefix ${prefix})
run_step("configure consumer" ${CMAKE_COMMAND} -S ${QD_SOURCE_DIR}/examples/consumer
         -B ${consumer_build} -G ${CMAKE_GENERATOR} -DCMAKE_PREFIX_PATH=${prefix})
run_step("build consumer" ${CMAKE_COMMAND} --build ${consumer_build})
run_step("run consumer" ${consumer_build}/qd-consumer)

string(FIND "${step_output}" "kernel @sum_sin()" has_kernel)
string(FIND "${step_output}" "%s = sin %xi : f32" has_sin)
string(FIND "${step_output}" "atomic_add @y[], %r : f32" has_add)
if(has_kernel EQUAL -1 OR has_sin EQUAL -1 OR has_add EQUAL -1)
  message(FATAL_ERROR "unexpected consumer output:\n${step_output}")
endif()
message(STATUS "consumer output:\n${step_output}")

run_step("run the transforms consumer" ${consumer_build}/qd-consumer-transforms)
string(FIND "${step_output}" "kernel @k_grad()" has_grad)
if(has_grad EQUAL -1)
  message(FATAL_ERROR "unexpected qd-consumer-transforms output:\n${step_output}")
endif()

run_step("run the CPU backend consumer" ${consumer_build}/qd-consumer-cpu)
string(FIND "${step_output}" "y = 1 3 5 7 9 11 13 15" has_values)
if(has_values EQUAL -1)
  message(FATAL_ERROR "unexpected qd-consumer-cpu output:\n${step_output}")
endif()

run_step("run the registry consumer" ${consumer_build}/qd-consumer-registry)
string(FIND "${step_output}" "backends: interp cpu" has_backends)
string(FIND "${step_output}" "x = 0 1 4 9" has_squares)
if(has_backends EQUAL -1 OR has_squares EQUAL -1)
  message(FATAL_ERROR "unexpected qd-consumer-registry output:\n${step_output}")
endif()

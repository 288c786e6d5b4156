# Included by tests/CMakeLists.txt: the kernels of kernels/ built for the CPU emulator
# (tests/emu/cuda_emu.h), and the GPU test programs that need nothing else built a second time
# against them, so CI (label `unit`) runs on the emulator the same test code that `ctest -L gpu`
# runs on a device.
#
#   baton_cuda_emu_runtime   cuda_emu_runtime.cpp: the CUDA runtime calls of the launchers and the
#                            tests on host memory (one emulated H100); takes cudart's place.
#   baton_kernels_emulated   gen_host_kernels.py --whole of each kernels/X.cu listed below, kernels
#                            AND launchers (regenerated when the .cu, a kernels/*.cuh or the
#                            generator changes; errors point into the .cu).
#   unit.test_bf16_kernels_emulated         tests/gpu/test_bf16_kernels.cpp, unchanged.
#   unit.test_flash_attention_gpu_emulated  tests/gpu/test_flash_attention.cpp, unchanged.
#   unit.test_kernels_emulated   what those do not reach (fp32 kernels, AdamW, reductions) and the
#                                emulator's own rules.
#   unit.test_gen_host_kernels   the generator's rewrites and refusals (Python only).
# The emulator is single-threaded (fibers) and deterministic; the whole set runs in ~15 s.
#
# gemm.cu, matmul.cu, attention.cu, gemm_lt.cu, matmul_bf16.cu call cuBLAS/cuBLASLt: they are built
# in tests/emu/emulated_blas.cmake (included at the end) against a CPU shim of those libraries
# (tests/emu/cublas_emu.cpp), with the programs that need them (test_gemm_lt, test_cuda_ops,
# test_cuda_bf16_model, test_cuda_cnn, the last three through an emulated build of the CUDA
# backend, whose CNN ops call cuDNN: a CPU shim of it too, tests/emu/cudnn_emu.cpp).
find_package(Python3 COMPONENTS Interpreter)
if(NOT Python3_Interpreter_FOUND)
  message(WARNING "no Python 3 interpreter: the emulated kernel tests are not built")
  return()
endif()
# The generator's rewrites and refusals on snippets (Python only).
add_test(NAME unit.test_gen_host_kernels
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/emu/test_gen_host_kernels.py)
set_tests_properties(unit.test_gen_host_kernels PROPERTIES LABELS unit TIMEOUT 60)
if(NOT BATON_HAVE_CUDA)  # the CUDA headers (bf16 and vector types, runtime API declarations)
  return()
endif()
find_package(Threads REQUIRED)

add_library(baton_cuda_emu_runtime STATIC ${CMAKE_CURRENT_SOURCE_DIR}/emu/cuda_emu_runtime.cpp)
target_include_directories(baton_cuda_emu_runtime PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/emu
                                                         ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(baton_cuda_emu_runtime PUBLIC Threads::Threads)

set(emu_kernel_names elementwise gelu layernorm embedding classifier cast adamw sgd reduce
                     flash_attention cnn dropout)
file(GLOB emu_kernel_headers CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/kernels/*.cuh)
set(emu_kernel_srcs)
foreach(k ${emu_kernel_names})
  set(out ${CMAKE_CURRENT_BINARY_DIR}/emu/kernels/${k}_host.cpp)
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/emu/gen_host_kernels.py --whole
            --src ${PROJECT_SOURCE_DIR}/kernels/${k}.cu --root ${PROJECT_SOURCE_DIR} --out ${out}
    DEPENDS ${PROJECT_SOURCE_DIR}/kernels/${k}.cu ${emu_kernel_headers}
            ${CMAKE_CURRENT_SOURCE_DIR}/emu/gen_host_kernels.py
    COMMENT "Generating the CPU emulation of kernels/${k}.cu (with its launchers)"
    VERBATIM)
  list(APPEND emu_kernel_srcs ${out})
endforeach()
add_library(baton_kernels_emulated STATIC ${emu_kernel_srcs})
target_include_directories(baton_kernels_emulated PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(baton_kernels_emulated PUBLIC baton_cuda_emu_runtime)
# The kernels type-pun through reinterpret_cast (uint4 <-> __nv_bfloat162 in kernels/cast.cuh), as
# CUDA code does; GCC would apply strict aliasing to it on the host (and warn, or drop the stores).
target_compile_options(baton_kernels_emulated PRIVATE -fno-strict-aliasing)
# GCC cannot follow the register caches of the row kernels (written and read under the same
# `c < C` conditions) and warns; nvcc does not.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  target_compile_options(baton_kernels_emulated PRIVATE -Wno-maybe-uninitialized)
endif()

# The GPU test programs, unchanged (no shape skipped: ~2 s and ~9 s emulated).
add_executable(test_bf16_kernels_emulated ${CMAKE_CURRENT_SOURCE_DIR}/gpu/test_bf16_kernels.cpp)
target_link_libraries(test_bf16_kernels_emulated PRIVATE baton_kernels_emulated GTest::gtest
                                                         GTest::gtest_main)
add_test(NAME unit.test_bf16_kernels_emulated COMMAND test_bf16_kernels_emulated)
set_tests_properties(unit.test_bf16_kernels_emulated PROPERTIES LABELS unit TIMEOUT 300
                     PROCESSORS 2)

# The flash-attention GPU test with its CPU twin (src/backend/cpu/cpu_flash_attention.cpp
# compiled in: baton_backend would bring the real kernels and cudart): unlike
# unit.test_flash_attention_emulated, which launches the kernels itself, this goes through the
# launchers (shape checks, the 48 KiB+ shared-memory opt-in, grids).
add_executable(test_flash_attention_gpu_emulated
               ${CMAKE_CURRENT_SOURCE_DIR}/gpu/test_flash_attention.cpp
               ${PROJECT_SOURCE_DIR}/src/backend/cpu/cpu_flash_attention.cpp)
target_link_libraries(test_flash_attention_gpu_emulated PRIVATE baton_kernels_emulated baton_core
                                                                GTest::gtest GTest::gtest_main)
# The GPT-2-shape case (B 4, T 1024, 12 heads) is a GPU test only: far too slow on the emulator.
add_test(NAME unit.test_flash_attention_gpu_emulated COMMAND test_flash_attention_gpu_emulated
         --gtest_filter=-FlashAttentionGpu.Gpt2Shape*)
set_tests_properties(unit.test_flash_attention_gpu_emulated PROPERTIES LABELS unit TIMEOUT 300)

# What that program does not reach: the fp32 kernels, AdamW, kernels/reduce.cu (tested on a GPU by
# test_cuda_ops, which needs cuBLAS), and the emulator's own rules (launch errors, static shared
# memory per block, deadlocks, a missing-barrier negative control).
add_executable(test_kernels_emulated ${CMAKE_CURRENT_SOURCE_DIR}/emu/test_kernels_emulated.cpp)
target_link_libraries(test_kernels_emulated PRIVATE baton_kernels_emulated GTest::gtest
                                                    GTest::gtest_main)
add_test(NAME unit.test_kernels_emulated COMMAND test_kernels_emulated)
set_tests_properties(unit.test_kernels_emulated PROPERTIES LABELS unit TIMEOUT 120)

# The cuBLAS/cuBLASLt users (gemm, matmul, attention, gemm_lt, matmul_bf16), a cuBLAS shim and the
# programs that need them: tests/emu/emulated_blas.cmake.
include(${CMAKE_CURRENT_SOURCE_DIR}/emu/emulated_blas.cmake)

# Included at the end of tests/emu/emulated_kernels.cmake (so only where that file built
# baton_kernels_emulated): the cuBLAS/cuBLASLt users of kernels/ and the CUDA backend, on the CPU
# emulator with a CPU shim of the cuBLAS and cuBLASLt calls baton makes (tests/emu/cublas_emu.cpp;
# what it supports and refuses is described there).
#
#   baton_cublas_emu              cublas_emu.cpp: takes libcublas' and libcublasLt's place.
#   baton_cudnn_emu               cudnn_emu.cpp: takes libcudnn's place (the CNN ops).
#   baton_kernels_blas_emulated   gen_host_kernels.py --whole of kernels/{gemm,matmul,attention,
#                                 gemm_lt,matmul_bf16}.cu (gemm.cu and matmul_bf16.cu have no
#                                 kernels of their own: --allow-no-kernels).
#   baton_backend_emulated        src/backend/*.cpp, cpu/*.cpp and cuda/*.cpp (host C++,
#                                 BATON_HAVE_CUDA=1) against the emulated kernels, the runtime shim
#                                 and the cuBLAS and cuDNN shims instead of baton_kernels, cudart,
#                                 cuBLAS and cuDNN.
#   unit.test_gemm_lt_emulated        tests/gpu/test_gemm_lt.cpp, unchanged.
#   unit.test_cuda_ops_emulated       tests/gpu/test_cuda_ops.cpp, unchanged.
#   unit.test_cuda_bf16_model_emulated tests/gpu/test_cuda_bf16_model.cpp, unchanged.
#   unit.test_cuda_cnn_emulated       tests/gpu/test_cuda_cnn.cpp, unchanged (the CNN ops: baton's
#                                     cuDNN calls and the kernels around them, not cuDNN).
#   unit.test_cudnn_sdpa_emulated     tests/gpu/test_cudnn_sdpa.cpp, unchanged: precision.attention =
#                                     "cudnn", baton's cuDNN graphs run by cudnn_emu.cpp's graph
#                                     interpreter; ..._no_engines: the same with the shim offering
#                                     no engine (BATON_CUDNN_EMU_NO_ENGINES=1), the error path.
# The two backend programs need src/model (and src/optim): their sources are compiled into the
# test programs, since the baton_model/baton_optim targets link the real baton_backend (cudart,
# cuBLAS, the device kernels). src/config, src/dist and src/core are linked as they are (they do not
# call CUDA except baton_dist's NCCL files, which these programs do not reach; the runtime shim is
# linked before them, see the check below).
# Every emulated program fails (FAIL_REGULAR_EXPRESSION) if a test skipped for want of a device:
# that would mean the real cudart, not the shim, answered cudaGetDeviceCount.

set(emu_blas_names gemm matmul attention gemm_lt matmul_bf16)
set(emu_blas_srcs)
foreach(k ${emu_blas_names})
  set(out ${CMAKE_CURRENT_BINARY_DIR}/emu/kernels/${k}_host.cpp)
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/emu/gen_host_kernels.py --whole
            --allow-no-kernels --src ${PROJECT_SOURCE_DIR}/kernels/${k}.cu
            --root ${PROJECT_SOURCE_DIR} --out ${out}
    DEPENDS ${PROJECT_SOURCE_DIR}/kernels/${k}.cu ${emu_kernel_headers}
            ${CMAKE_CURRENT_SOURCE_DIR}/emu/gen_host_kernels.py
    COMMENT "Generating the CPU emulation of kernels/${k}.cu (with its launchers)"
    VERBATIM)
  list(APPEND emu_blas_srcs ${out})
endforeach()

add_library(baton_cublas_emu STATIC ${CMAKE_CURRENT_SOURCE_DIR}/emu/cublas_emu.cpp)
target_include_directories(baton_cublas_emu PUBLIC ${CUDAToolkit_INCLUDE_DIRS})
target_compile_options(baton_cublas_emu PRIVATE -O2)

add_library(baton_cudnn_emu STATIC ${CMAKE_CURRENT_SOURCE_DIR}/emu/cudnn_emu.cpp)
target_include_directories(baton_cudnn_emu PUBLIC ${CUDNN_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS}
                                           PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_options(baton_cudnn_emu PRIVATE -O2)

add_library(baton_kernels_blas_emulated STATIC ${emu_blas_srcs})
target_include_directories(baton_kernels_blas_emulated PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(baton_kernels_blas_emulated PUBLIC baton_kernels_emulated baton_cublas_emu)
target_compile_options(baton_kernels_blas_emulated PRIVATE -fno-strict-aliasing)
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  target_compile_options(baton_kernels_blas_emulated PRIVATE -Wno-maybe-uninitialized)
endif()

# (a) the cuBLASLt GEMMs and the bf16 dense layer. The GPT-2 shapes (N = 8192 x C = 768 x OC up to
# 50304, ~20-300 GFLOP per test) are left out: a double-accumulating CPU GEMM needs minutes for
# each. Everything else runs (every mode, odd shapes, padded ld, misaligned pointers, GELU form,
# cache, preconditions, the small dense forward and backward shapes): ~1 s.
add_executable(test_gemm_lt_emulated ${CMAKE_CURRENT_SOURCE_DIR}/gpu/test_gemm_lt.cpp)
target_link_libraries(test_gemm_lt_emulated PRIVATE baton_kernels_blas_emulated GTest::gtest
                                                    GTest::gtest_main)
add_test(NAME unit.test_gemm_lt_emulated
         COMMAND test_gemm_lt_emulated
                 --gtest_filter=-GemmLt.DenseForwardGpt2:GemmLt.DenseBackwardGpt2:GemmLt.Deterministic)
set_tests_properties(unit.test_gemm_lt_emulated PROPERTIES LABELS unit TIMEOUT 300
                     FAIL_REGULAR_EXPRESSION "skipped: no CUDA device")
# The same with cuBLASLt refusing every fused epilogue, in the heuristic or at cublasLtMatmul
# (cublas_emu.cpp, BATON_CUBLASLT_EMU_REFUSE_EPILOGUES): LtGemm's two fallback paths (no algorithm
# -> DEFAULT plan + epilogue kernel; refused at launch -> re-planned unfused) under every mode.
foreach(stage heuristic matmul)
  add_test(NAME unit.test_gemm_lt_emulated_refuse_${stage}
           COMMAND test_gemm_lt_emulated
                   --gtest_filter=-GemmLt.DenseForwardGpt2:GemmLt.DenseBackwardGpt2:GemmLt.Deterministic)
  set_tests_properties(unit.test_gemm_lt_emulated_refuse_${stage} PROPERTIES LABELS unit TIMEOUT 300
                       ENVIRONMENT BATON_CUBLASLT_EMU_REFUSE_EPILOGUES=${stage}
                       FAIL_REGULAR_EXPRESSION "skipped: no CUDA device")
endforeach()

# (b) the CUDA backend (src/backend/cuda/cuda_backend.cpp, host C++) against the emulated kernels
# and both shims: the backend's sources as src/backend/CMakeLists.txt lists them, another link set.
file(GLOB emu_backend_srcs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/backend/*.cpp
     ${PROJECT_SOURCE_DIR}/src/backend/cpu/*.cpp ${PROJECT_SOURCE_DIR}/src/backend/cuda/*.cpp)
add_library(baton_backend_emulated STATIC ${emu_backend_srcs})
target_include_directories(baton_backend_emulated PUBLIC ${PROJECT_SOURCE_DIR}/src)
# BATON_CUDA_HOST_MEMORY: "device" memory is the runtime shim's host memory, which the backend's
# arena may then mark for AddressSanitizer (cuda_backend.cpp, DeviceArena; checked by
# test_cuda_ops' ArenaReportsAnAccessPastATensorUnderAsan).
target_compile_definitions(baton_backend_emulated PUBLIC BATON_HAVE_CUDA=1 BATON_CUDA_HOST_MEMORY=1)
target_link_libraries(baton_backend_emulated PUBLIC baton_core baton_kernels_blas_emulated baton_cudnn_emu
                      PRIVATE PkgConfig::OPENBLAS OpenMP::OpenMP_CXX baton_dnnl)
target_compile_options(baton_backend_emulated PRIVATE -O3 -ffp-contract=fast)
# Source-file options are per directory: the per-ISA files' (no fused multiply-adds, so their
# target_clones give the same bits; src/backend/CMakeLists.txt) carried over from src/backend.
foreach(per_isa cpu_math.cpp cpu_adamw.cpp)
  set(per_isa_src ${PROJECT_SOURCE_DIR}/src/backend/cpu/${per_isa})
  get_source_file_property(per_isa_opts ${per_isa_src} DIRECTORY ${PROJECT_SOURCE_DIR}/src/backend COMPILE_OPTIONS)
  set_source_files_properties(${per_isa_src} PROPERTIES COMPILE_OPTIONS "${per_isa_opts}")
endforeach()
# src/model and src/optim (their targets link the real baton_backend).
file(GLOB emu_model_srcs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/model/*.cpp
     ${PROJECT_SOURCE_DIR}/src/optim/*.cpp)
add_library(baton_model_emulated STATIC ${emu_model_srcs})
target_link_libraries(baton_model_emulated PUBLIC baton_backend_emulated baton_config baton_dist
                                                  baton_core)
# Left out (gtest filter below):
#   CudaBf16.FollowsFp32For50StepsDeterministicallyWithoutMallocs: 105 training steps per head
#     size, minutes emulated. MatchesCpuEmulation (3 steps, both head sizes: flash attention and
#     the fp32 fallback, CPU bf16 emulation as reference) runs: ~15 s.
foreach(t test_cuda_ops test_cuda_bf16_model test_cuda_cnn_model)
  add_executable(${t}_emulated ${CMAKE_CURRENT_SOURCE_DIR}/gpu/${t}.cpp)
  target_link_libraries(${t}_emulated PRIVATE baton_model_emulated GTest::gtest GTest::gtest_main)
endforeach()
add_test(NAME unit.test_cuda_ops_emulated
         COMMAND test_cuda_ops_emulated)
add_test(NAME unit.test_cuda_bf16_model_emulated
         COMMAND test_cuda_bf16_model_emulated --gtest_filter=*MatchesCpuEmulation*)
# ResNets and a VGG, three steps in fp32 and bf16 against the CPU backend (the model's use of the
# CNN ops, the cuDNN shim): every test.
add_test(NAME unit.test_cuda_cnn_model_emulated COMMAND test_cuda_cnn_model_emulated)
# The CNN ops (the backend only: no model sources): every test of the GPU program, unchanged.
add_executable(test_cuda_cnn_emulated ${CMAKE_CURRENT_SOURCE_DIR}/gpu/test_cuda_cnn.cpp)
target_link_libraries(test_cuda_cnn_emulated PRIVATE baton_backend_emulated GTest::gtest GTest::gtest_main)
add_test(NAME unit.test_cuda_cnn_emulated COMMAND test_cuda_cnn_emulated)
# precision.attention = "cudnn" (the backend only).
add_executable(test_cudnn_sdpa_emulated ${CMAKE_CURRENT_SOURCE_DIR}/gpu/test_cudnn_sdpa.cpp)
target_link_libraries(test_cudnn_sdpa_emulated PRIVATE baton_backend_emulated GTest::gtest GTest::gtest_main)
add_test(NAME unit.test_cudnn_sdpa_emulated
         COMMAND test_cudnn_sdpa_emulated --gtest_filter=-CudnnSdpa.NoEngineIsAClearError)
add_test(NAME unit.test_cudnn_sdpa_emulated_no_engines
         COMMAND test_cudnn_sdpa_emulated --gtest_filter=CudnnSdpa.NoEngineIsAClearError)
# The second fails, not skips, if the switch did not reach it.
set_tests_properties(unit.test_cudnn_sdpa_emulated unit.test_cudnn_sdpa_emulated_no_engines PROPERTIES
                     LABELS unit TIMEOUT 300 FAIL_REGULAR_EXPRESSION "skipped: no CUDA device|needs BATON_CUDNN_EMU")
set_tests_properties(unit.test_cudnn_sdpa_emulated_no_engines PROPERTIES ENVIRONMENT BATON_CUDNN_EMU_NO_ENGINES=1)
set_tests_properties(unit.test_cuda_ops_emulated unit.test_cuda_bf16_model_emulated
                     unit.test_cuda_cnn_emulated unit.test_cuda_cnn_model_emulated PROPERTIES
                     LABELS unit TIMEOUT 300 PROCESSORS 2
                     FAIL_REGULAR_EXPRESSION "skipped: no CUDA device")

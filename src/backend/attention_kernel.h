// Which kernel computes the causal self-attention core on the GPU (precision.attention, issue 20):
//   AUTO  -- the backend's default: today baton's flash kernel in bf16 where it supports the head
//            size, else the materialised fp32 attention (the faster of flash and cuDNN becomes the
//            default once measured on a GPU);
//   FLASH -- baton's flash kernel (kernels/flash_attention.cuh); an error where it cannot run
//            (fp32 compute, a head size other than 32 / 64 / 128);
//   CUDNN -- cuDNN's fused flash attention (src/backend/cuda/cudnn_sdpa.h); an error where it
//            cannot run (fp32 compute, a head size that is not a multiple of 8 up to 128).
// FLASH and CUDNN are CUDA kernels: on the CPU backend either is an error (backend/device.cpp).
// Both keep the same state, the logsumexp lse[B,NH,T], so their states are interchangeable.
#pragma once
#include <cstdint>
#include <string>

namespace baton {

enum class AttentionKernel : uint8_t { AUTO, FLASH, CUDNN };

// precision.attention: "auto" | "flash" | "cudnn" (Error with a hint otherwise).
AttentionKernel parse_attention_kernel(const std::string& name);
const char* to_string(AttentionKernel k);

}  // namespace baton

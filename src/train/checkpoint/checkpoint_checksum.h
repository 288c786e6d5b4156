// Per-tensor checksum of checkpoints, defined over the full logical tensor so that it does not
// depend on how the tensor was sharded when it was written or read:
//
//   checksum(T) = sum over i of splitmix64((i << 32) | bits(T[i]))   (mod 2^64)
//
// i is the element's linear index in C (row-major) order of the full tensor, bits its IEEE-754
// fp32 bit pattern. Because it is a sum of per-element terms, any piece of a tensor (a hyperslab
// box) has a partial checksum computed from the global indices of its elements, and the partial
// sums of a partition add up (mod 2^64, in any order) to the checksum of the whole tensor: an exact,
// deterministic combine for any sharding (multi-rank: MPI_Allreduce(MPI_UINT64_T, MPI_SUM)).
// splitmix64 is a bijection, so changing any one element always changes the sum; hashing the index
// with the value makes moved or swapped elements count as changes too.
#pragma once
#include <cstdint>
#include <span>
#include <string>

namespace baton {

inline constexpr const char* kChecksumAlgorithm = "sum64(splitmix64(index<<32|fp32 bits))";

// Partial checksum of the box at `offset` with `extent` of a tensor of shape `full_shape`;
// `box` holds the box's elements in C order. The full tensor is offset 0, extent = full_shape.
uint64_t checksum_box(const float* box, std::span<const int64_t> full_shape,
                      std::span<const int64_t> offset, std::span<const int64_t> extent);

// Checksum of a whole tensor held in C order.
uint64_t checksum_tensor(const float* data, std::span<const int64_t> shape);

// "0x" + 16 hex digits, the form shown by `baton ckpt inspect` and in errors.
std::string checksum_hex(uint64_t c);

}  // namespace baton

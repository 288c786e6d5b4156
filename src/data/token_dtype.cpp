#include "data/indexed_dataset.h"

namespace baton {

TokenDType token_dtype_for_vocab(int64_t vocab_size) {
  return vocab_size <= 65536 ? TokenDType::U16 : TokenDType::I32;
}

}  // namespace baton

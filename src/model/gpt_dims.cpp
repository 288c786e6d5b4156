#include "model/gpt_dims.h"

#include <fmt/format.h>

#include "core/error.h"

namespace baton {

GptDims gpt_dims(const ModelConfig& m, int tokenizer_vocab) {
  GptDims d;
  d.n_layer = m.n_layer;
  d.n_head = m.n_head;
  d.d_model = m.d_model;
  d.seq_len = m.seq_len;
  d.vocab = m.vocab_size > 0 ? m.vocab_size : tokenizer_vocab;
  BATON_REQUIRE(d.vocab > 0, "model.vocab_size is 0 and no tokenizer gives the vocabulary",
                "set data.tokenizer, or model.vocab_size");
  BATON_REQUIRE(m.vocab_size == 0 || tokenizer_vocab == 0 || m.vocab_size >= tokenizer_vocab,
                fmt::format("model.vocab_size = {} is smaller than the tokenizer's {} tokens",
                            m.vocab_size, tokenizer_vocab),
                "set model.vocab_size = 0 to take the tokenizer's size");
  d.vocab_padded = pad_vocab(d.vocab);
  d.dropout = float(m.dropout);
  return d;
}

}  // namespace baton

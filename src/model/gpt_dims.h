// Sizes of a GPT (DESIGN §5 letters): L layers, NH heads, C channels, T max sequence, V vocabulary
// and Vp = V padded to a multiple of 128 (efficient GEMMs; padded logits are masked in the loss).
#pragma once
#include "config/config.h"

namespace baton {

struct GptDims {
  int n_layer = 0;  // L
  int n_head = 0;   // NH
  int d_model = 0;  // C
  int seq_len = 0;  // T (maximum; positions table size)
  int vocab = 0;    // V
  int vocab_padded = 0;  // Vp
  float dropout = 0;     // hidden dropout (model/gpt_dropout.h)
  int head_size() const { return d_model / n_head; }
};

inline int pad_vocab(int v, int multiple = 128) { return (v + multiple - 1) / multiple * multiple; }

// The sizes of a GPT with the vocabulary padded as training pads it (tests, benches).
inline GptDims make_gpt_dims(int n_layer, int n_head, int d_model, int seq_len, int vocab) {
  return {.n_layer = n_layer, .n_head = n_head, .d_model = d_model, .seq_len = seq_len, .vocab = vocab,
          .vocab_padded = pad_vocab(vocab)};
}

// model.vocab_size when set, else the tokenizer's.
GptDims gpt_dims(const ModelConfig& m, int tokenizer_vocab);

}  // namespace baton

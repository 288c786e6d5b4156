// Plain-text corpora as a stream of documents, the one rule shared by `baton data build`, the
// tokenizer trainer and data/fetch-brown.sh (documented in data/README.md):
//   a line consisting of exactly `<|endoftext|>` (optionally followed by '\r') ends a document;
//   the end of a file ends a document too, so a file without separator lines is one document.
// A document's text is its lines joined by '\n' (the newline before a separator or at the end of
// the file is not part of it). Documents with no non-whitespace character are skipped.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>

namespace baton {

inline constexpr std::string_view kDocumentSeparator = "<|endoftext|>";

// True for a separator line (the line without its '\n').
bool is_document_separator(std::string_view line);

// Throws baton::Error naming `path` when it is missing, not a readable regular file, or not text:
// a NUL byte or a byte sequence that is not UTF-8 anywhere in it (a dataset's .bin, a gzip file,
// an image, binary data after text), which would otherwise be tokenized as if it were text. Reads
// the whole file (about 1 GB/s); `baton data build` and the tokenizer trainer call it first.
void require_input_file(const std::string& path);

// The offset of the first byte of `bytes` that is NUL or breaks UTF-8 (a sequence cut by the end
// of `bytes` does not count), or -1.
int64_t first_non_text_byte(std::string_view bytes);

// Reads the documents of one file in order, a line at a time (memory: one document).
class DocumentReader {
 public:
  // Throws baton::Error if unreadable; callers check the file with require_input_file first.
  explicit DocumentReader(const std::string& path);
  // Next non-blank document into `doc`; false at the end of the file.
  bool next(std::string& doc);
  // Bytes consumed so far (for progress reports).
  int64_t bytes_read() const { return bytes_; }

 private:
  std::string path_;
  std::ifstream in_;
  std::string line_;
  int64_t bytes_ = 0;
};

}  // namespace baton

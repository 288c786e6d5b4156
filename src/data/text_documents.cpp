// Document splitting of plain-text inputs; the rule is stated in text_documents.h.
#include "data/text_documents.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <vector>

#include "core/error.h"

namespace baton {

bool is_document_separator(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line == kDocumentSeparator;
}

namespace {

// Where the sequence cut by the end of `b` starts (its lead byte and 1–2 continuation bytes), or
// b.size() when nothing is cut: those bytes are scanned again with the next chunk.
size_t cut_sequence_start(std::string_view b) {
  for (size_t back = 1; back <= 3 && back <= b.size(); ++back) {
    const auto c = static_cast<unsigned char>(b[b.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: the lead is further back
    const size_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 1;
    return len > back ? b.size() - back : b.size();
  }
  return b.size();
}

[[noreturn]] void not_text(const std::string& path, int64_t at, unsigned char byte) {
  throw Error(fmt::format("input {} is not text: byte {} (0x{:02x}) is {}", path, at, byte,
                          byte == 0 ? "NUL" : "not UTF-8"),
              "pass plain-text (UTF-8) files to --input; a built dataset (.bin/.idx) or a compressed "
              "file is not text (decompress it first)");
}

}  // namespace

void require_input_file(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status))
    throw Error(fmt::format("input file {} not found", path),
                "check the --input paths (for the Brown corpus run data/fetch-brown.sh first)");
  if (!std::filesystem::is_regular_file(status))
    throw Error(fmt::format("input {} is not a regular file", path),
                "pass plain-text files to --input (e.g. corpus/*.txt), not directories");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("cannot read input file {}", path), "check its permissions");
  // The whole file, in chunks (a binary tail after text — NULs, a gzip member — would otherwise be
  // tokenized as text; issue 22: 70 KB of text then NULs passed a check of the first 64 KiB).
  std::string buf;
  std::vector<char> chunk(size_t(1) << 20);
  int64_t offset = 0;  // of buf[0] in the file
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    const auto got = static_cast<size_t>(in.gcount());
    if (got == 0) break;
    buf.append(chunk.data(), got);
    if (const int64_t at = first_non_text_byte(buf); at >= 0)
      not_text(path, offset + at, static_cast<unsigned char>(buf[size_t(at)]));
    const size_t keep = cut_sequence_start(buf);
    offset += static_cast<int64_t>(keep);
    buf.erase(0, keep);
  }
  if (in.bad()) throw Error(fmt::format("error while reading {}", path), "check the file and the disk");
  if (!buf.empty()) not_text(path, offset, static_cast<unsigned char>(buf[0]));  // cut by the end of the file
}

int64_t first_non_text_byte(std::string_view b) {
  const size_t n = b.size();
  for (size_t i = 0; i < n;) {
    const auto c = static_cast<unsigned char>(b[i]);
    if (c == 0) return int64_t(i);
    if (c < 0x80) { ++i; continue; }
    // Lead byte: 2-, 3- or 4-byte sequence (no overlong 0xC0/0xC1, nothing above U+10FFFF).
    const size_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (len == 0) return int64_t(i);
    if (i + len > n) return -1;  // cut by the end of the probe
    for (size_t k = 1; k < len; ++k)
      if ((static_cast<unsigned char>(b[i + k]) & 0xC0) != 0x80) return int64_t(i);
    // RFC 3629's second-byte ranges: no overlong 3- and 4-byte forms, no UTF-16 surrogates
    // (U+D800..U+DFFF, which GPT-2 BPE's PCRE2 check refuses too), nothing above U+10FFFF.
    const auto c1 = static_cast<unsigned char>(b[i + 1]);
    if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) || (c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 > 0x8F))
      return int64_t(i);
    i += len;
  }
  return -1;
}

DocumentReader::DocumentReader(const std::string& path) : path_(path) {
  in_.open(path, std::ios::binary);  // checked as text by require_input_file beforehand
  if (!in_) throw Error(fmt::format("cannot read input file {}", path), "check its permissions");
}

bool DocumentReader::next(std::string& doc) {
  doc.clear();
  bool has_text = false;
  bool first = true;
  while (std::getline(in_, line_)) {
    bytes_ += static_cast<int64_t>(line_.size()) + 1;
    if (is_document_separator(line_)) {
      if (has_text) return true;
      doc.clear();  // a blank document: skip it and keep reading
      first = true;
      continue;
    }
    if (!first) doc += '\n';
    doc += line_;
    first = false;
    has_text = has_text || std::any_of(line_.begin(), line_.end(),
                                       [](unsigned char c) { return !std::isspace(c); });
  }
  if (in_.bad())
    throw Error(fmt::format("error while reading {}", path_), "check the file and the disk");
  return has_text;
}

}  // namespace baton

// Document splitting of plain-text inputs; the rule is stated in text_documents.h.
#include "data/text_documents.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "core/error.h"

namespace baton {

bool is_document_separator(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line == kDocumentSeparator;
}

void require_input_file(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status))
    throw Error(fmt::format("input file {} not found", path),
                "check the --input paths (for the Brown corpus run data/fetch-brown.sh first)");
  if (!std::filesystem::is_regular_file(status))
    throw Error(fmt::format("input {} is not a regular file", path),
                "pass plain-text files to --input (e.g. corpus/*.txt), not directories");
  std::ifstream probe(path, std::ios::binary);
  if (!probe) throw Error(fmt::format("cannot read input file {}", path), "check its permissions");
}

DocumentReader::DocumentReader(const std::string& path) : path_(path) {
  require_input_file(path);
  in_.open(path, std::ios::binary);
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

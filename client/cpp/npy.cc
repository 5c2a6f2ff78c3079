#include "client/cpp/npy.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>

#include "absl/base/config.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

// .npy data is little-endian and NpyArray::data holds it as is; the '|' and '=' byte
// orders mean little-endian only on a little-endian host.
#ifndef ABSL_IS_LITTLE_ENDIAN
#error "layerserve's .npy reader assumes a little-endian host"
#endif

namespace layerserve::client {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;
// numpy aligns the data to 64 bytes (numpy.lib.format.ARRAY_ALIGN) so it can be
// memory-mapped; writing the same keeps our files byte-identical to numpy.save's.
constexpr size_t kArrayAlign = 64;
// numpy pads the header so the first dimension can grow in place
// (numpy.lib.format.GROWTH_AXIS_MAX_DIGITS); copied for byte-identical output.
constexpr size_t kGrowthAxisMaxDigits = 21;

// What numpy writes for the supported dtypes.
const char* Descr(ElementType type) {
  switch (type) {
    case ElementType::kFloat32:
      return "<f4";
    case ElementType::kFloat16:
      return "<f2";
    case ElementType::kBfloat16:
      break;
  }
  return nullptr;
}

// Python's repr of a shape tuple: "()", "(5,)", "(2, 3)".
std::string ShapeRepr(const std::vector<int64_t>& shape) {
  if (shape.size() == 1) return absl::StrCat("(", shape[0], ",)");
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

// The header's Python value types that .npy headers use.
struct HeaderValue {
  enum class Kind { kString, kBool, kTuple } kind;
  std::string string_value;
  bool bool_value = false;
  std::vector<int64_t> tuple_value;
};

// Parses the Python dict literal of a .npy header, e.g.
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// followed by padding spaces and '\n'. Only the value types .npy headers use are
// accepted: strings, True/False and tuples of non-negative integers.
class HeaderParser {
 public:
  explicit HeaderParser(absl::string_view text) : text_(text) {}

  absl::StatusOr<std::map<std::string, HeaderValue>> Parse() {
    std::map<std::string, HeaderValue> dict;
    SkipSpace();
    if (!Consume('{')) return Error("expected '{'");
    SkipSpace();
    while (!Consume('}')) {
      std::string key;
      if (absl::Status s = ParseString(&key); !s.ok()) return s;
      SkipSpace();
      if (!Consume(':')) return Error("expected ':'");
      SkipSpace();
      HeaderValue value;
      if (absl::Status s = ParseValue(&value); !s.ok()) return s;
      if (!dict.emplace(key, std::move(value)).second) {
        return Error(absl::StrCat("duplicate key '", key, "'"));
      }
      SkipSpace();
      // A trailing comma before '}' is allowed, as in Python (numpy writes one).
      if (Consume(',')) {
        SkipSpace();
      } else if (Peek() != '}') {
        return Error("expected ',' or '}'");
      }
    }
    SkipSpace();
    if (pos_ != text_.size()) return Error("unexpected text after '}'");
    return dict;
  }

 private:
  char Peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }

  bool Consume(char c) {
    if (Peek() != c) return false;
    ++pos_;
    return true;
  }

  bool ConsumeWord(absl::string_view word) {
    if (!absl::StartsWith(text_.substr(pos_), word)) return false;
    pos_ += word.size();
    return true;
  }

  void SkipSpace() {
    while (pos_ < text_.size() && absl::ascii_isspace(text_[pos_])) ++pos_;
  }

  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("cannot parse header: ", what,
                                                   " at offset ", pos_, " in \"",
                                                   Printable(text_), "\""));
  }

  // The header for an error message: trailing padding dropped, bytes that are not
  // printable ASCII as \xNN, and cut short if long.
  static std::string Printable(absl::string_view text) {
    constexpr size_t kMaxShown = 200;
    text = absl::StripTrailingAsciiWhitespace(text);
    std::string out;
    for (char c : text.substr(0, kMaxShown)) {
      if (absl::ascii_isprint(c)) {
        out.push_back(c);
      } else {
        absl::StrAppend(&out, "\\x",
                        absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
      }
    }
    if (text.size() > kMaxShown) out.append("...");
    return out;
  }

  // A Python string literal in single or double quotes, without escapes (the keys
  // and the supported dtype descriptors never need them).
  absl::Status ParseString(std::string* out) {
    char quote = Peek();
    if (quote != '\'' && quote != '"') return Error("expected a quoted string");
    size_t end = text_.find(quote, pos_ + 1);
    if (end == absl::string_view::npos) return Error("unterminated string");
    *out = std::string(text_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return absl::OkStatus();
  }

  absl::Status ParseValue(HeaderValue* out) {
    const bool is_true = ConsumeWord("True");
    if (is_true || ConsumeWord("False")) {
      out->kind = HeaderValue::Kind::kBool;
      out->bool_value = is_true;
      return absl::OkStatus();
    }
    if (Consume('(')) {
      out->kind = HeaderValue::Kind::kTuple;
      SkipSpace();
      while (!Consume(')')) {
        size_t start = pos_;
        while (absl::ascii_isdigit(Peek())) ++pos_;
        int64_t dim;
        if (!absl::SimpleAtoi(text_.substr(start, pos_ - start), &dim)) {
          pos_ = start;
          return Error("expected a non-negative integer");
        }
        out->tuple_value.push_back(dim);
        SkipSpace();
        if (Consume(',')) {
          SkipSpace();
        } else if (Peek() != ')') {
          return Error("expected ',' or ')'");
        }
      }
      return absl::OkStatus();
    }
    if (Peek() != '\'' && Peek() != '"') {
      return Error("expected a value (a string, True, False or a tuple)");
    }
    out->kind = HeaderValue::Kind::kString;
    return ParseString(&out->string_value);
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

// Little-endian unsigned integer of `size` bytes at `p`.
uint32_t LoadLittleEndian(const char* p, int size) {
  uint32_t value = 0;
  for (int i = size - 1; i >= 0; --i) {
    value = (value << 8) | static_cast<unsigned char>(p[i]);
  }
  return value;
}

absl::StatusOr<ElementType> ParseDescr(const std::string& descr) {
  if (descr.size() == 3 && descr[1] == 'f' && (descr[2] == '4' || descr[2] == '2')) {
    auto type = descr[2] == '4' ? ElementType::kFloat32 : ElementType::kFloat16;
    if (descr[0] == '<' || descr[0] == '|' || descr[0] == '=') return type;
    if (descr[0] == '>') {
      return absl::InvalidArgumentError(absl::StrCat(
          "dtype '", descr, "' is big-endian; only little-endian is supported (",
          "convert with a.astype('<", descr.substr(1), "'))"));
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported dtype '", descr,
                   "'; supported are '<f4' (float32) and '<f2' (float16) (convert with "
                   "a.astype(np.float32))"));
}

absl::StatusOr<NpyArray> ParseNpyImpl(absl::string_view bytes) {
  constexpr size_t kPreambleV1 = kMagicSize + 2 + 2;
  if (bytes.size() < kMagicSize || bytes.substr(0, kMagicSize) != kMagic) {
    return absl::InvalidArgumentError(
        "not a .npy file (bad magic: the file must start with \\x93NUMPY)");
  }
  if (bytes.size() < kPreambleV1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "truncated: the file has ", bytes.size(), " bytes, less than a .npy preamble"));
  }
  int major = static_cast<unsigned char>(bytes[kMagicSize]);
  int minor = static_cast<unsigned char>(bytes[kMagicSize + 1]);
  if (major < 1 || major > 3 || minor != 0) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported .npy format version ",
                                                   major, ".", minor,
                                                   " (supported: 1.0, 2.0, 3.0)"));
  }
  // Version 1.0 stores the header length in 2 bytes, 2.0 and 3.0 in 4.
  const int length_size = major == 1 ? 2 : 4;
  const size_t preamble = kMagicSize + 2 + length_size;
  if (bytes.size() < preamble) {
    return absl::InvalidArgumentError(absl::StrCat(
        "truncated: the file has ", bytes.size(), " bytes, less than a .npy preamble"));
  }
  const size_t header_size = LoadLittleEndian(bytes.data() + kMagicSize + 2, length_size);
  if (bytes.size() - preamble < header_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("truncated: the header length field says ", header_size,
                     " bytes, only ", bytes.size() - preamble, " follow"));
  }
  const absl::string_view header = bytes.substr(preamble, header_size);
  const absl::string_view data = bytes.substr(preamble + header_size);

  absl::StatusOr<std::map<std::string, HeaderValue>> dict = HeaderParser(header).Parse();
  if (!dict.ok()) return dict.status();
  for (const auto& [key, value] : *dict) {
    if (key != "descr" && key != "fortran_order" && key != "shape") {
      return absl::InvalidArgumentError(absl::StrCat(
          "header has unknown key '", key,
          "' (a .npy header has exactly 'descr', 'fortran_order' and 'shape')"));
    }
  }
  auto get = [&](const char* key,
                 HeaderValue::Kind kind) -> absl::StatusOr<const HeaderValue*> {
    auto it = dict->find(key);
    if (it == dict->end()) {
      return absl::InvalidArgumentError(absl::StrCat("header has no '", key, "' key"));
    }
    if (it->second.kind != kind) {
      static constexpr const char* kKindNames[] = {"a string", "True or False",
                                                   "a tuple"};
      return absl::InvalidArgumentError(absl::StrCat("header '", key, "' must be ",
                                                     kKindNames[static_cast<int>(kind)]));
    }
    return &it->second;
  };
  absl::StatusOr<const HeaderValue*> descr = get("descr", HeaderValue::Kind::kString);
  if (!descr.ok()) return descr.status();
  absl::StatusOr<const HeaderValue*> fortran =
      get("fortran_order", HeaderValue::Kind::kBool);
  if (!fortran.ok()) return fortran.status();
  absl::StatusOr<const HeaderValue*> shape = get("shape", HeaderValue::Kind::kTuple);
  if (!shape.ok()) return shape.status();

  NpyArray array;
  absl::StatusOr<ElementType> dtype = ParseDescr((*descr)->string_value);
  if (!dtype.ok()) return dtype.status();
  array.dtype = *dtype;
  if ((*fortran)->bool_value) {
    return absl::InvalidArgumentError(
        "fortran_order is True; only C order is supported (save "
        "np.ascontiguousarray(a) instead)");
  }
  array.shape = (*shape)->tuple_value;

  // The byte count must fit int64 before it can be compared; a malicious header can
  // claim any shape.
  const int64_t element_size = ElementSize(array.dtype);
  int64_t elements = 1;
  for (int64_t dim : array.shape) {
    if (dim != 0 && elements > std::numeric_limits<int64_t>::max() / element_size / dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", ShapeRepr(array.shape), " is too large"));
    }
    elements *= dim;
  }
  const int64_t needed = elements * element_size;
  const int64_t present = static_cast<int64_t>(data.size());
  if (needed != present) {
    return absl::InvalidArgumentError(absl::StrCat(
        needed > present ? "truncated data: shape " : "data size mismatch: shape ",
        ShapeRepr(array.shape), " '", (*descr)->string_value, "' needs ", needed,
        " bytes of data, the file has ", present));
  }
  array.data = std::string(data);
  return array;
}

}  // namespace

int64_t NpyArray::NumElements() const {
  int64_t n = 1;
  for (int64_t dim : shape) n *= dim;
  return n;
}

absl::StatusOr<NpyArray> ParseNpy(absl::string_view bytes, absl::string_view name) {
  absl::StatusOr<NpyArray> array = ParseNpyImpl(bytes);
  if (!array.ok()) {
    return absl::Status(array.status().code(),
                        absl::StrCat(name, ": ", array.status().message()));
  }
  return array;
}

absl::StatusOr<NpyArray> ReadNpyFile(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"),
                                             &std::fclose);
  if (file == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  }
  std::string bytes;
  char buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file.get())) > 0) {
    bytes.append(buffer, n);
  }
  if (std::ferror(file.get())) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", path));
  }
  return ParseNpy(bytes, path);
}

absl::StatusOr<std::string> SerializeNpy(const NpyArray& array) {
  const char* descr = Descr(array.dtype);
  if (descr == nullptr) {
    return absl::InvalidArgumentError(
        "bfloat16 has no .npy dtype; convert to float32 or float16 first");
  }
  for (int64_t dim : array.shape) {
    if (dim < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("negative dimension in shape ", ShapeRepr(array.shape)));
    }
  }
  const int64_t expected = array.NumElements() * ElementSize(array.dtype);
  if (static_cast<int64_t>(array.data.size()) != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape ", ShapeRepr(array.shape), " '", descr, "' needs ", expected,
                     " bytes of data, got ", array.data.size()));
  }

  // The same bytes numpy.save writes (numpy.lib.format._write_array_header).
  std::string header = absl::StrCat("{'descr': '", descr, "', 'fortran_order': False, ",
                                    "'shape': ", ShapeRepr(array.shape), ", }");
  if (!array.shape.empty()) {
    header.append(kGrowthAxisMaxDigits - absl::StrCat(array.shape[0]).size(), ' ');
  }
  // numpy's rule: version 1.0 (a 2-byte header length) unless the padded header does
  // not fit it, then 2.0 (4 bytes).
  auto padded_size = [&header](size_t length_size) {
    const size_t unpadded = kMagicSize + 2 + length_size + header.size() + 1;
    return header.size() + 1 + kArrayAlign - unpadded % kArrayAlign;
  };
  const int length_size = padded_size(2) <= std::numeric_limits<uint16_t>::max() ? 2 : 4;
  const size_t padded = padded_size(length_size);
  std::string out(kMagic, kMagicSize);
  out.push_back(length_size == 2 ? 1 : 2);
  out.push_back(0);
  for (int i = 0; i < length_size; ++i) {
    out.push_back(static_cast<char>(padded >> (8 * i)));
  }
  out.append(header);
  out.append(padded - header.size() - 1, ' ');
  out.push_back('\n');
  out.append(array.data);
  return out;
}

absl::Status WriteNpyFile(const std::string& path, const NpyArray& array) {
  absl::StatusOr<std::string> bytes = SerializeNpy(array);
  if (!bytes.ok()) {
    return absl::Status(bytes.status().code(),
                        absl::StrCat(path, ": ", bytes.status().message()));
  }
  FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot create ", path));
  }
  bool ok = std::fwrite(bytes->data(), 1, bytes->size(), file) == bytes->size();
  // fclose flushes: its failure is a failed write too.
  ok = std::fclose(file) == 0 && ok;
  if (!ok) return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace layerserve::client

#include "train/safetensors.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>
#include <vector>

#include "small_file.h"

namespace weft {

namespace {

const char* st_dtype(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::I32: return "I32";
    case DType::U16: return "U16";
  }
  return "?";
}

bool parse_dtype(const std::string& s, DType* out) {
  for (DType t : {DType::F32, DType::BF16, DType::I32, DType::U16}) {
    if (s == st_dtype(t)) {
      *out = t;
      return true;
    }
  }
  return false;
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw CheckpointError(path + ": " + what);
}

// Weights and optimizer files are opened by name: a FIFO or a device there
// would block or never end (contract/small_file.h).
void require_regular(const std::string& path) {
  const std::string problem = irregular_file_problem(path);
  if (!problem.empty()) throw CheckpointError(problem);
}

uint64_t read_header_length(const std::string& path, const char* bytes, uint64_t file_size) {
  if (file_size < 8) fail(path, "truncated: " + std::to_string(file_size) + " bytes, no header");
  uint64_t hlen = 0;
  for (int i = 0; i < 8; ++i) hlen |= uint64_t(static_cast<unsigned char>(bytes[i])) << (8 * i);
  if (hlen > file_size - 8)
    fail(path, "truncated: header claims " + std::to_string(hlen) + " bytes, file has " +
                   std::to_string(file_size));
  // Hugging Face's safetensors refuses a header above 100 MB too: parsing
  // one that size takes seconds and gigabytes, and no real file has one (a
  // header entry is ~100 bytes per tensor).
  if (hlen > kMaxSafetensorsHeaderBytes)
    fail(path, "header of " + std::to_string(hlen) + " bytes exceeds the " +
                   std::to_string(kMaxSafetensorsHeaderBytes) + "-byte limit (100 MB, as the safetensors library's)");
  return hlen;
}

// Validates a parsed header against a data section of data_size bytes that
// starts at data_begin; fills tensors (absolute offsets) and meta.
void parse_entries(const std::string& path, const char* hbegin, const char* hend, uint64_t data_begin,
                   uint64_t data_size, std::map<std::string, SafetensorsIndex::Entry>& tensors,
                   std::map<std::string, std::string>& meta) {
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(hbegin, hend);
  } catch (const std::exception& e) {
    fail(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) fail(path, "header is not a JSON object");
  uint64_t covered = 0;
  std::vector<std::tuple<uint64_t, uint64_t, std::string>> ranges;  // [begin, end) of each tensor's bytes
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) fail(path, "__metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m)
        if (m->is_string()) meta[m.key()] = m->get<std::string>();
      continue;
    }
    const nlohmann::json& e = *it;
    SafetensorsIndex::Entry v;
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") ||
        !e.contains("data_offsets") || !e["dtype"].is_string() || !e["shape"].is_array() ||
        !e["data_offsets"].is_array() || e["data_offsets"].size() != 2 ||
        !e["data_offsets"][0].is_number_unsigned() || !e["data_offsets"][1].is_number_unsigned())
      fail(path, "tensor '" + it.key() + "' has a malformed header entry");
    v.dtype = e["dtype"].get<std::string>();
    const size_t esize = safetensors_dtype_size(v.dtype);
    if (esize == 0) fail(path, "tensor '" + it.key() + "' has unsupported dtype " + e["dtype"].dump());
    // The shape comes from the file: its product (and the byte count) must
    // not wrap around to a size that happens to match the offsets.
    int64_t n = 1;
    for (const auto& d : e["shape"]) {
      if (!d.is_number_integer() || (d.is_number_unsigned() && d.get<uint64_t>() > INT64_MAX) ||
          d.get<int64_t>() < 0)
        fail(path, "tensor '" + it.key() + "' has a bad shape " + e["shape"].dump());
      v.shape.push_back(d.get<int64_t>());
      if (__builtin_mul_overflow(n, v.shape.back(), &n))
        fail(path, "tensor '" + it.key() + "' has shape " + e["shape"].dump() +
                       ", whose element count overflows 64 bits");
    }
    v.numel = n;
    uint64_t b = e["data_offsets"][0].get<uint64_t>(), end = e["data_offsets"][1].get<uint64_t>();
    if (__builtin_mul_overflow(static_cast<uint64_t>(n), static_cast<uint64_t>(esize), &v.bytes))
      fail(path, "tensor '" + it.key() + "' has shape " + e["shape"].dump() +
                     ", whose byte count overflows 64 bits");
    if (b > end || end > data_size)
      fail(path, "truncated: tensor '" + it.key() + "' ends at byte " + std::to_string(end) +
                     " of a " + std::to_string(data_size) + "-byte data section");
    if (end - b != v.bytes)
      fail(path, "tensor '" + it.key() + "' has " + std::to_string(end - b) +
                     " bytes, its shape needs " + std::to_string(v.bytes));
    v.offset = data_begin + b;
    ranges.emplace_back(b, end, it.key());
    if (__builtin_add_overflow(covered, v.bytes, &covered))
      fail(path, "tensors cover more than 2^64 bytes");
    tensors[it.key()] = std::move(v);
  }
  // Two tensors over the same bytes would load one's values into both (the
  // byte count alone can still match when a gap makes up for the overlap).
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    const auto& [b0, e0, n0] = ranges[i - 1];
    const auto& [b1, e1, n1] = ranges[i];
    if (b1 < e0 && b1 < e1)
      fail(path, "tensors '" + n0 + "' (bytes " + std::to_string(b0) + "-" + std::to_string(e0) + ") and '" + n1 +
                     "' (bytes " + std::to_string(b1) + "-" + std::to_string(e1) + ") overlap");
  }
  if (covered != data_size)
    fail(path, "data section has " + std::to_string(data_size) + " bytes but tensors cover " +
                   std::to_string(covered));
}

uint32_t crc_update(uint32_t crc, const void* data, size_t n) {
  const Bytef* p = static_cast<const Bytef*>(data);
  while (n > 0) {  // zlib's length is 32-bit
    uInt chunk = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    crc = static_cast<uint32_t>(::crc32(crc, p, chunk));
    p += chunk;
    n -= chunk;
  }
  return crc;
}

}  // namespace

void SafetensorsWriter::add(const std::string& name, DType dtype,
                            const std::vector<int64_t>& shape, const void* data) {
  add(name, st_dtype(dtype), shape, data);
}

void SafetensorsWriter::add(const std::string& name, const std::string& dtype,
                            const std::vector<int64_t>& shape, const void* data) {
  WEFT_CHECK(safetensors_dtype_size(dtype) > 0, "unknown safetensors dtype " + dtype);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  entries_.push_back({name, dtype, shape, data, static_cast<size_t>(n) * safetensors_dtype_size(dtype), {}, {}});
}

void SafetensorsWriter::add_pieces(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                                   std::vector<Piece> pieces) {
  add(name, dtype, shape, nullptr);
  size_t bytes = 0;
  for (const Piece& p : pieces) bytes += p.bytes;
  WEFT_CHECK(bytes == entries_.back().bytes, "safetensors: the pieces of " + name + " hold " + std::to_string(bytes) +
                                                 " bytes, its shape " + std::to_string(entries_.back().bytes));
  entries_.back().pieces = std::move(pieces);
}

void SafetensorsWriter::add_streamed(const std::string& name, const std::string& dtype,
                                     const std::vector<int64_t>& shape, Fill fill) {
  add(name, dtype, shape, nullptr);
  entries_.back().fill = std::move(fill);
}

void SafetensorsWriter::add(const std::string& name, const Tensor& t) {
  WEFT_CHECK(t.device == Device::CPU, "safetensors writes host tensors");
  std::vector<int64_t> shape(t.shape.d.begin(), t.shape.d.begin() + t.rank());
  add(name, t.dtype, shape, t.data);
}

uint32_t SafetensorsWriter::write(const std::string& path) const {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!meta_.empty()) header["__metadata__"] = meta_;
  size_t offset = 0;
  for (const Entry& e : entries_) {
    header[e.name] = {{"dtype", e.dtype},
                      {"shape", e.shape},
                      {"data_offsets", {offset, offset + e.bytes}}};
    offset += e.bytes;
  }
  std::string h = header.dump();
  h.resize((h.size() + 7) / 8 * 8, ' ');  // align the data section
  uint64_t hlen = h.size();

  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) fail(path, std::string("cannot create: ") + std::strerror(errno));
  uint32_t crc = crc_update(0, nullptr, 0);
  auto put = [&](const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    size_t left = n;
    while (left > 0) {
      ssize_t w = ::write(fd, c, left);
      if (w < 0) {
        if (errno == EINTR) continue;
        int err = errno;
        ::close(fd);
        fail(path, std::string("write failed: ") + std::strerror(err));
      }
      c += w;
      left -= static_cast<size_t>(w);
    }
    crc = crc_update(crc, p, n);
  };
  unsigned char lenbytes[8];
  for (int i = 0; i < 8; ++i) lenbytes[i] = static_cast<unsigned char>(hlen >> (8 * i));
  put(lenbytes, 8);
  put(h.data(), h.size());
  for (const Entry& e : entries_) {
    if (!e.pieces.empty()) {
      for (const Piece& p : e.pieces) put(p.data, p.bytes);
      continue;
    }
    if (!e.fill) {
      put(e.data, e.bytes);
      continue;
    }
    const size_t esize = safetensors_dtype_size(e.dtype);
    const int64_t numel = static_cast<int64_t>(e.bytes / esize);
    const int64_t per_chunk = std::max<int64_t>(1, static_cast<int64_t>(kStreamChunkBytes / esize));
    std::vector<char> staged(static_cast<size_t>(std::min(numel, per_chunk)) * esize);
    for (int64_t first = 0; first < numel; first += per_chunk) {
      const int64_t count = std::min(per_chunk, numel - first);
      try {
        e.fill(first, count, staged.data());
      } catch (...) {
        ::close(fd);
        throw;
      }
      put(staged.data(), static_cast<size_t>(count) * esize);
    }
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) fail(path, std::string("fsync/close: ") + std::strerror(errno));
  return crc;
}

SafetensorsFile SafetensorsFile::load(const std::string& path) {
  SafetensorsFile f;
  require_regular(path);
  f.path_ = path;
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) fail(path, "cannot open");
  std::streamsize size = in.tellg();
  if (size < 0) fail(path, "cannot read");
  // The header's length first: a file whose header is refused is not read.
  char lenbytes[8] = {};
  in.seekg(0);
  if (size >= 8 && !in.read(lenbytes, 8)) fail(path, "read failed");
  read_header_length(path, lenbytes, static_cast<uint64_t>(size));
  f.bytes_.resize(static_cast<size_t>(size));
  in.seekg(0);
  if (!in.read(f.bytes_.data(), size)) fail(path, "read failed");

  const uint64_t hlen = read_header_length(path, f.bytes_.data(), static_cast<uint64_t>(size));
  std::map<std::string, SafetensorsIndex::Entry> entries;
  parse_entries(path, f.bytes_.data() + 8, f.bytes_.data() + 8 + hlen, 8 + hlen,
                static_cast<uint64_t>(size) - 8 - hlen, entries, f.meta_);
  for (auto& [name, e] : entries) {
    View v;
    if (!parse_dtype(e.dtype, &v.dtype))
      fail(path, "tensor '" + name + "' has unsupported dtype \"" + e.dtype + "\"");
    v.shape = e.shape;
    v.data = f.bytes_.data() + e.offset;
    v.bytes = e.bytes;
    f.tensors_[name] = std::move(v);
  }
  return f;
}

size_t safetensors_dtype_size(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

SafetensorsIndex SafetensorsIndex::open(const std::string& path) {
  SafetensorsIndex f;
  require_regular(path);
  f.path_ = path;
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) fail(path, "cannot open");
  const std::streamsize size = in.tellg();
  if (size < 0) fail(path, "cannot read");
  char lenbytes[8] = {};
  in.seekg(0);
  if (size >= 8 && !in.read(lenbytes, 8)) fail(path, "read failed");
  const uint64_t hlen = read_header_length(path, lenbytes, static_cast<uint64_t>(size));
  std::vector<char> header(hlen);
  if (!in.read(header.data(), static_cast<std::streamsize>(hlen))) fail(path, "read failed");
  parse_entries(path, header.data(), header.data() + hlen, 8 + hlen,
                static_cast<uint64_t>(size) - 8 - hlen, f.tensors_, f.meta_);
  return f;
}

const SafetensorsIndex::Entry& SafetensorsIndex::at(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) fail(path_, "missing tensor '" + name + "'");
  return it->second;
}

void SafetensorsIndex::read_raw(const std::string& name, int64_t first, int64_t count,
                                void* dst) const {
  const Entry& e = at(name);
  if (first < 0 || count < 0 || first > e.numel || count > e.numel - first)
    fail(path_, "tensor '" + name + "': elements [" + std::to_string(first) + ", " +
                    std::to_string(first + count) + ") outside its " + std::to_string(e.numel));
  const size_t esize = safetensors_dtype_size(e.dtype);
  int fd = ::open(path_.c_str(), O_RDONLY);
  if (fd < 0) fail(path_, std::string("cannot open: ") + std::strerror(errno));
  char* out = static_cast<char*>(dst);
  uint64_t pos = e.offset + static_cast<uint64_t>(first) * esize;
  size_t left = static_cast<size_t>(count) * esize;
  while (left > 0) {
    ssize_t r = ::pread(fd, out, left, static_cast<off_t>(pos));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      int err = errno;
      ::close(fd);
      fail(path_, "tensor '" + name + "': read failed" + (r < 0 ? std::string(": ") + std::strerror(err) : " (file shrank)"));
    }
    out += r;
    pos += static_cast<uint64_t>(r);
    left -= static_cast<size_t>(r);
  }
  ::close(fd);
}

const SafetensorsFile::View& SafetensorsFile::get(const std::string& name, DType dtype,
                                                  int64_t numel) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) fail(path_, "missing tensor '" + name + "'");
  const View& v = it->second;
  if (v.dtype != dtype) fail(path_, "tensor '" + name + "' is " + st_dtype(v.dtype) + ", expected " + st_dtype(dtype));
  if (static_cast<int64_t>(v.bytes / dtype_size(dtype)) != numel)
    fail(path_, "tensor '" + name + "' has " + std::to_string(v.bytes / dtype_size(dtype)) +
                    " elements, expected " + std::to_string(numel));
  return v;
}

uint32_t crc32_of_file(const std::string& path, const std::function<void()>& each_mib) {
  require_regular(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open");
  std::vector<char> buf(1 << 20);
  uint32_t crc = crc_update(0, nullptr, 0);
  while (in) {
    if (each_mib) each_mib();
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    crc = crc_update(crc, buf.data(), static_cast<size_t>(in.gcount()));
  }
  return crc;
}

void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail(path, std::string("cannot open for fsync: ") + std::strerror(errno));
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) fail(path, std::string("fsync: ") + std::strerror(errno));
}

}  // namespace weft

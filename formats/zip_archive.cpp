// Zip archives (PKWARE APPNOTE 6.3): the end-of-central-directory record, zip64's
// record and extra fields, the central directory, local headers. Every offset and size
// is checked against the archive before it is followed; nothing is allocated from a
// size the archive declares until that size was bounded by the archive's own length.
#include "internal/zip_archive.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <unordered_set>

#include "../tensor/error.h"

namespace reel::detail {

namespace {

constexpr uint32_t kLocalHeader = 0x04034b50, kCentralHeader = 0x02014b50, kEnd = 0x06054b50,
                   kEnd64 = 0x06064b50, kEnd64Locator = 0x07064b50;
// libFuzzer's convention: a fuzzing build lets mutations behind a CRC reach the parsers
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
constexpr bool kCheckCrc = false;
#else
constexpr bool kCheckCrc = true;
#endif
// deflate cannot expand beyond 1032:1 (RFC 1951's longest match per shortest code)
constexpr uint64_t kMaxDeflateRatio = 1032;

uint64_t le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

void ZipArchive::fail(const std::string& message) const { throw Error(prefix_ + ": " + message); }

ZipArchive::ZipArchive(const uint8_t* data, size_t size, std::string error_prefix)
    : data_(data), size_(size), prefix_(std::move(error_prefix)) {
  // The end record is the last 22 bytes plus a comment of up to 65535 bytes.
  if (size_ < 22) fail(fmt::format("not a zip archive: {} bytes, shorter than a zip's end record", size_));
  size_t end = size_;  // position of the end record, found searching backwards
  const size_t lowest = size_ > 22 + 65535 ? size_ - 22 - 65535 : 0;
  for (size_t p = size_ - 22;; --p) {
    if (le(data_ + p, 4) == kEnd && p + 22 + le(data_ + p + 20, 2) == size_) {
      end = p;
      break;
    }
    if (p == lowest) break;
  }
  if (end == size_) fail("not a zip archive (no end-of-central-directory record), or truncated");
  const uint8_t* e = data_ + end;
  if (le(e + 4, 2) != 0 || le(e + 6, 2) != 0) fail("multi-volume zip archives are not supported");
  uint64_t count = le(e + 10, 2), cd_size = le(e + 12, 4), cd_offset = le(e + 16, 4);
  if (count == 0xffff || cd_size == 0xffffffff || cd_offset == 0xffffffff) {
    if (end < 20 || le(data_ + end - 20, 4) != kEnd64Locator)
      fail("the end record asks for zip64, but no zip64 locator precedes it");
    uint64_t at = le(data_ + end - 20 + 8, 8);
    if (at > end - 20 || end - 20 - at < 56 || le(data_ + at, 4) != kEnd64)
      fail(fmt::format("the zip64 end record at byte {} is missing or out of bounds", at));
    count = le(data_ + at + 32, 8);
    cd_size = le(data_ + at + 40, 8);
    cd_offset = le(data_ + at + 48, 8);
  }
  if (cd_offset > end || cd_size > end - cd_offset)
    fail(fmt::format("the central directory (bytes {} + {}) lies outside the archive of {} bytes", cd_offset,
                     cd_size, size_));
  // each central header is at least 46 bytes: bounds the count before reserving
  if (count > cd_size / 46)
    fail(fmt::format("the central directory declares {} entries in {} bytes", count, cd_size));
  entries_.reserve(size_t(count));
  std::unordered_set<std::string> names;
  const uint8_t* p = data_ + cd_offset;
  const uint8_t* cd_end = p + cd_size;
  for (uint64_t i = 0; i < count; ++i) {
    if (cd_end - p < 46 || le(p, 4) != kCentralHeader) fail(fmt::format("central directory entry {} is corrupt", i));
    uint64_t flags = le(p + 8, 2), method = le(p + 10, 2), crc = le(p + 16, 4), csize = le(p + 20, 4),
             usize = le(p + 24, 4), name_len = le(p + 28, 2), extra_len = le(p + 30, 2),
             comment_len = le(p + 32, 2), local = le(p + 42, 4);
    if (uint64_t(cd_end - p) < 46 + name_len + extra_len + comment_len)
      fail(fmt::format("central directory entry {} runs past the directory", i));
    std::string name(reinterpret_cast<const char*>(p + 46), size_t(name_len));
    // zip64: the fields that hold 0xffffffff follow in the extra field 0x0001, in order
    for (const uint8_t *x = p + 46 + name_len, *x_end = x + extra_len; x_end - x >= 4;) {
      uint64_t id = le(x, 2), len = le(x + 2, 2);
      if (uint64_t(x_end - x - 4) < len) fail(fmt::format("entry \"{}\": extra field runs past its header", name));
      if (id == 1) {
        const uint8_t *f = x + 4, *f_end = f + len;
        for (uint64_t* field : {&usize, &csize, &local}) {
          if (*field != 0xffffffff) continue;
          if (f_end - f < 8) fail(fmt::format("entry \"{}\": zip64 extra field too short", name));
          *field = le(f, 8);
          f += 8;
        }
      }
      x += 4 + len;
    }
    if (flags & 1) fail(fmt::format("entry \"{}\" is encrypted", name));
    if (local > cd_offset || cd_offset - local < 30 || le(data_ + local, 4) != kLocalHeader)
      fail(fmt::format("entry \"{}\": its local header at byte {} is missing or out of bounds", name, local));
    uint64_t skip = 30 + le(data_ + local + 26, 2) + le(data_ + local + 28, 2);
    // an entry's data lies before the central directory
    if (skip > cd_offset - local || csize > cd_offset - local - skip)
      fail(fmt::format("entry \"{}\" ({} bytes at byte {}) runs past the archive's data", name, csize, local));
    if (method == 0 && csize != usize)
      fail(fmt::format("entry \"{}\" is stored, but declares {} bytes compressed and {} uncompressed", name, csize,
                       usize));
    if (!names.insert(name).second) fail(fmt::format("entry \"{}\" appears twice", name));
    entries_.push_back({.name = std::move(name), .data_offset = local + skip, .compressed_size = csize,
                        .size = usize, .crc32 = uint32_t(crc), .method = uint16_t(method)});
    p += 46 + name_len + extra_len + comment_len;
  }
}

const ZipEntry* ZipArchive::find(const std::string& name) const {
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const ZipEntry& e) { return e.name == name; });
  return it == entries_.end() ? nullptr : &*it;
}

std::span<const uint8_t> ZipArchive::read(const ZipEntry& entry, std::vector<uint8_t>& scratch) const {
  const uint8_t* src = data_ + entry.data_offset;
  std::span<const uint8_t> out;
  if (entry.method == 0) {
    out = {src, size_t(entry.size)};
  } else if (entry.method == 8) {
    if (entry.size > entry.compressed_size * kMaxDeflateRatio + 64)
      fail(fmt::format("entry \"{}\" declares {} bytes from {} deflated: more than deflate can give", entry.name,
                       entry.size, entry.compressed_size));
    scratch.assign(size_t(entry.size), 0);
    z_stream z{};
    if (inflateInit2(&z, -MAX_WBITS) != Z_OK) fail("zlib's inflateInit2 failed");
    z.next_in = const_cast<uint8_t*>(src);
    z.next_out = scratch.data();
    uint64_t in_left = entry.compressed_size, out_left = entry.size;
    int rc = Z_OK;
    while (rc == Z_OK) {
      // zlib counts in 32-bit units: feed at most 1 GiB at a time
      uInt in_chunk = uInt(std::min<uint64_t>(in_left, 1u << 30)), out_chunk = uInt(std::min<uint64_t>(out_left, 1u << 30));
      z.avail_in = in_chunk;
      z.avail_out = out_chunk;
      rc = inflate(&z, Z_NO_FLUSH);
      in_left -= in_chunk - z.avail_in;
      out_left -= out_chunk - z.avail_out;
      if (rc == Z_OK && in_chunk == z.avail_in && out_chunk == z.avail_out) rc = Z_BUF_ERROR;  // no progress
    }
    inflateEnd(&z);
    if (rc != Z_STREAM_END || out_left != 0)
      fail(fmt::format("entry \"{}\": the deflate stream is corrupt or does not give its {} bytes", entry.name,
                       entry.size));
    out = {scratch.data(), scratch.size()};
  } else {
    fail(fmt::format("entry \"{}\" uses compression method {}; only stored (0) and deflated (8) are read",
                     entry.name, entry.method));
  }
  uint32_t crc = uint32_t(crc32_z(0, out.data(), out.size()));
  if (kCheckCrc && crc != entry.crc32)
    fail(fmt::format("entry \"{}\" is corrupt: CRC-32 {:08x}, the directory says {:08x}", entry.name, crc,
                     entry.crc32));
  return out;
}

}  // namespace reel::detail

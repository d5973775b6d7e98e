// A zip archive read from bytes in memory: the central directory (zip64 too), stored
// and deflated entries, each checked against the archive's bounds and its CRC-32.
// Internal to the readers of weight files (torch_pt.cpp); not part of reel.h.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace reel::detail {

struct ZipEntry {
  std::string name;
  uint64_t data_offset = 0;      // of the entry's (compressed) bytes in the archive
  uint64_t compressed_size = 0;  // every byte of it lies inside the archive (checked)
  uint64_t size = 0;             // uncompressed
  uint32_t crc32 = 0;
  uint16_t method = 0;           // 0 stored, 8 deflated (others are refused when read)
};

class ZipArchive {
 public:
  // Reads the directory. `error_prefix` starts every Error ("torch_pt: file.pt").
  // Throws Error for anything that is not a well-formed zip archive: no end record,
  // entries or names out of bounds, duplicate names, encrypted entries.
  ZipArchive(const uint8_t* data, size_t size, std::string error_prefix);

  const std::vector<ZipEntry>& entries() const { return entries_; }
  const ZipEntry* find(const std::string& name) const;  // nullptr when absent

  // The entry's bytes: a view into the archive for a stored entry, else inflated into
  // `scratch` (allocated only after its declared size passed deflate's largest ratio).
  // Throws Error for an unknown method, a corrupt stream or a CRC mismatch.
  std::span<const uint8_t> read(const ZipEntry& entry, std::vector<uint8_t>& scratch) const;

 private:
  [[noreturn]] void fail(const std::string& message) const;
  const uint8_t* data_;
  size_t size_;
  std::string prefix_;
  std::vector<ZipEntry> entries_;
};

}  // namespace reel::detail

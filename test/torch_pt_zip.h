// Test helper: writes zip archives (stored or deflated entries) in memory, so the torch_pt
// tests can hand the reader archives that PyTorch would never write.
#pragma once
#include <zlib.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace reel::test {

using Bytes = std::vector<uint8_t>;

inline Bytes bytes_of(const std::string& s) { return Bytes(s.begin(), s.end()); }

inline void put_le(Bytes& b, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b.push_back(uint8_t(v >> (8 * i)));
}

// Raw deflate (no zlib header), as zip's method 8 holds it.
inline Bytes deflate_raw(const Bytes& in) {
  z_stream z{};
  deflateInit2(&z, 9, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  Bytes out(deflateBound(&z, uLong(in.size())));
  z.next_in = const_cast<uint8_t*>(in.data());
  z.avail_in = uInt(in.size());
  z.next_out = out.data();
  z.avail_out = uInt(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

struct ZipItem {
  std::string name;
  Bytes data;
  bool deflate = false;
  int64_t declared_size = -1;  // the uncompressed size the headers claim (-1: the true one)
};

// zip64: the central directory's sizes and offsets in zip64 extra fields, and the end
// record pointing to a zip64 end record, as writers do for archives past 4 GiB.
inline Bytes make_zip(const std::vector<ZipItem>& items, bool zip64 = false) {
  Bytes out, dir;
  for (const ZipItem& it : items) {
    Bytes body = it.deflate ? deflate_raw(it.data) : it.data;
    uint32_t crc = uint32_t(crc32(0, it.data.data(), uInt(it.data.size())));
    uint64_t usize = it.declared_size >= 0 ? uint64_t(it.declared_size) : it.data.size();
    uint64_t offset = out.size();
    auto header = [&](Bytes& b, bool central) {
      put_le(b, central ? 0x02014b50 : 0x04034b50, 4);
      if (central) put_le(b, 20, 2);  // version made by
      put_le(b, 20, 2);               // version needed
      put_le(b, 0, 2);                // flags
      put_le(b, it.deflate ? 8 : 0, 2);
      put_le(b, 0, 4);  // time, date
      put_le(b, crc, 4);
      bool wide = central && zip64;
      put_le(b, wide ? 0xffffffff : body.size(), 4);
      put_le(b, wide ? 0xffffffff : usize, 4);
      put_le(b, it.name.size(), 2);
      put_le(b, wide ? 32 : 0, 2);  // extra
      if (central) {
        put_le(b, 0, 2);  // comment
        put_le(b, 0, 2);  // disk
        put_le(b, 0, 2);  // internal attributes
        put_le(b, 0, 4);  // external attributes
        put_le(b, wide ? 0xffffffff : offset, 4);
      }
      b.insert(b.end(), it.name.begin(), it.name.end());
      if (wide) {
        put_le(b, 0x5455, 2);  // an unrelated extra field first (a timestamp), skipped
        put_le(b, 0, 2);
        put_le(b, 1, 2);
        put_le(b, 24, 2);
        put_le(b, usize, 8);
        put_le(b, body.size(), 8);
        put_le(b, offset, 8);
      }
    };
    header(out, false);
    out.insert(out.end(), body.begin(), body.end());
    header(dir, true);
  }
  uint64_t dir_offset = out.size();
  out.insert(out.end(), dir.begin(), dir.end());
  if (zip64) {
    uint64_t end64 = out.size();
    put_le(out, 0x06064b50, 4);
    put_le(out, 44, 8);  // the record's size after this field
    put_le(out, 45, 2);  // version made by
    put_le(out, 45, 2);  // version needed
    put_le(out, 0, 8);   // disks
    put_le(out, items.size(), 8);
    put_le(out, items.size(), 8);
    put_le(out, dir.size(), 8);
    put_le(out, dir_offset, 8);
    put_le(out, 0x07064b50, 4);  // the locator
    put_le(out, 0, 4);
    put_le(out, end64, 8);
    put_le(out, 1, 4);
  }
  put_le(out, 0x06054b50, 4);
  put_le(out, 0, 4);  // disks
  put_le(out, zip64 ? 0xffff : items.size(), 2);
  put_le(out, zip64 ? 0xffff : items.size(), 2);
  put_le(out, zip64 ? 0xffffffff : dir.size(), 4);
  put_le(out, zip64 ? 0xffffffff : dir_offset, 4);
  put_le(out, 0, 2);  // comment
  return out;
}

}  // namespace reel::test

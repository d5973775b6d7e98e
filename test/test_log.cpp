// log/: the TensorBoard event file's framing checked byte by byte against an independent
// bitwise CRC-32C (TensorBoard's own reader checks the values: test/tensorboard), the
// PNG encoder against zlib's inflate, and the errors for bad input.
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "gradcheck.h"

using namespace reel;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

uint32_t crc32c_bitwise(const uint8_t* p, size_t n) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
  }
  return ~c;
}
uint32_t masked(const uint8_t* p, size_t n) {
  uint32_t c = crc32c_bitwise(p, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::vector<std::string> records_of(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < bytes.size()) {
    REQUIRE(pos + 12 <= bytes.size());
    auto* p = reinterpret_cast<const uint8_t*>(bytes.data() + pos);
    uint64_t n;
    uint32_t len_crc, data_crc;
    std::memcpy(&n, p, 8);
    std::memcpy(&len_crc, p + 8, 4);
    REQUIRE(len_crc == masked(p, 8));
    REQUIRE(pos + 16 + n <= bytes.size());
    std::memcpy(&data_crc, p + 12 + n, 4);
    REQUIRE(data_crc == masked(p + 12, n));
    out.emplace_back(bytes.data() + pos + 12, n);
    pos += 16 + n;
  }
  return out;
}

}  // namespace

TEST_CASE("crc32c reference: the standard check value", "[log]") {
  const char* s = "123456789";
  REQUIRE(crc32c_bitwise(reinterpret_cast<const uint8_t*>(s), 9) == 0xe3069283u);
}

TEST_CASE("SummaryWriter: framed records with valid masked CRC-32C, one per add", "[log]") {
  fs::path dir = fs::temp_directory_path() / ("reel_log_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  {
    SummaryWriter tb(dir.string(), {.filename_suffix = ".test"});
    REQUIRE(tb.file().ends_with(".test"));
    REQUIRE(fs::path(tb.file()).filename().string().starts_with("events.out.tfevents."));
    tb.add_scalar("loss", 0.5, 1);
    tb.add_histogram("w", arange(0, 10, 1), 2, 4);
    tb.add_image("img", full({1, 2, 3}, 0.5), 3);
    tb.add_text("note", "hello", 4);
    tb.add_scalars("acc", {{"train", 0.9}, {"test", 0.8}}, 5);
    tb.close();
    auto recs = records_of(tb.file());
    REQUIRE(recs.size() == 5);  // file_version + 4 summaries (add_scalars writes into subfolders)
    REQUIRE_THAT(recs[0], Contains("brain.Event:2"));
    REQUIRE_THAT(recs[1], Contains("loss"));
    float half = 0.5f;  // simple_value: field 2, wire type 5, then the float's bytes
    REQUIRE(recs[1].find(std::string("\x15", 1) + std::string(reinterpret_cast<char*>(&half), 4)) != std::string::npos);
    REQUIRE_THAT(recs[3], Contains("\x89PNG"));
    REQUIRE_THAT(recs[4], Contains("hello"));
    for (const char* sub : {"acc_train", "acc_test"}) {
      REQUIRE(fs::is_directory(dir / sub));
      auto it = fs::directory_iterator(dir / sub);
      REQUIRE(records_of(it->path().string()).size() == 2);
    }
    REQUIRE_THROWS_WITH(tb.add_scalar("loss", 1, 2), Contains("closed"));
  }
  fs::remove_all(dir);
}

TEST_CASE("encode_png: IHDR of the size and colour type, IDAT inflating to filter-0 rows", "[log]") {
  std::vector<uint8_t> px = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};  // 2 x 2 RGB
  std::vector<uint8_t> png = encode_png(px.data(), 2, 2, 3);
  REQUIRE(std::memcmp(png.data(), "\x89PNG\r\n\x1a\n", 8) == 0);
  REQUIRE(std::memcmp(png.data() + 12, "IHDR", 4) == 0);
  REQUIRE(png[16 + 3] == 2);  // width 2 (big-endian)
  REQUIRE(png[20 + 3] == 2);  // height 2
  REQUIRE(png[24] == 8);      // bit depth
  REQUIRE(png[25] == 2);      // RGB
  size_t idat = 8 + 12 + 13;  // after the signature and IHDR
  uint32_t n = uint32_t(png[idat]) << 24 | uint32_t(png[idat + 1]) << 16 | uint32_t(png[idat + 2]) << 8 | png[idat + 3];
  REQUIRE(std::memcmp(png.data() + idat + 4, "IDAT", 4) == 0);
  std::vector<uint8_t> raw(64);
  uLongf raw_n = raw.size();
  REQUIRE(uncompress(raw.data(), &raw_n, png.data() + idat + 8, n) == Z_OK);
  REQUIRE(raw_n == 14);
  REQUIRE(std::vector<uint8_t>(raw.begin(), raw.begin() + 14) ==
          std::vector<uint8_t>{0, 1, 2, 3, 4, 5, 6, 0, 7, 8, 9, 10, 11, 12});
  REQUIRE_THROWS_WITH(encode_png(px.data(), 2, 2, 5), Contains("1, 2, 3 or 4 channels"));
}

TEST_CASE("SummaryWriter: bad input names the call and what came", "[log]") {
  fs::path dir = fs::temp_directory_path() / ("reel_log_err_" + std::to_string(::getpid()));
  SummaryWriter tb(dir.string());
  REQUIRE_THROWS_WITH(tb.add_image("x", zeros({2, 4, 4}), 0), Contains("add_image(x): expected 1, 3 or 4 channels, got 2"));
  REQUIRE_THROWS_WITH(tb.add_image("x", zeros({4}), 0), Contains("[C, H, W] or [H, W], got [4]"));
  REQUIRE_THROWS_WITH(tb.add_histogram("h", zeros({0}), 0), Contains("add_histogram(h): expected a tensor with values"));
  REQUIRE_THROWS_WITH(tb.add_histogram("h", full({2}, std::nan("")), 0), Contains("expected finite values"));
  tb.close();
  fs::remove_all(dir);
}

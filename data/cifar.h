// CIFAR-10, binary version: data_batch_1.bin ... data_batch_5.bin and test_batch.bin,
// each 10000 records of one label byte (0-9) and 3072 pixel bytes (1024 red, then
// green, then blue, each 32x32 row-major) -> images [N, 3, 32, 32], labels i64 [N].
//
//   data::ImageSet train = data::load_cifar10("/data/cifar-10-batches-bin", data::Split::train);
//
// A file whose length is not a whole number of records, or with a label above 9,
// gives an Error naming the function, the file and what is wrong.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "dataset.h"
#include "mnist.h"  // ImageOptions

namespace reel::data {

// Decodes CIFAR-10 records held in memory; `name` goes into errors.
ImageSet parse_cifar10(std::span<const uint8_t> bytes, const std::string& name, ImageOptions opt = {});
// Reads and concatenates the files in order (each gzip or plain).
ImageSet read_cifar10(const std::vector<std::string>& paths, ImageOptions opt = {});
// The five data_batch_N.bin files (train) or test_batch.bin (test) from `dir`.
ImageSet load_cifar10(const std::string& dir, Split split, ImageOptions opt = {});

}  // namespace reel::data

// Moved: the safetensors reader and writer live in formats/ (the file formats' folder).
// This header keeps `#include <reel/tensor/safetensors.h>` working; new code includes
// <reel/formats/safetensors.h> or <reel/reel.h>.
#pragma once
#include "../formats/safetensors.h"

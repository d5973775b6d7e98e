// Moved: the torch.save (.pt/.pth) reader lives in formats/ (the file formats' folder).
// This header keeps `#include <reel/tensor/torch_pt.h>` working; new code includes
// <reel/formats/torch_pt.h> or <reel/reel.h>.
#pragma once
#include "../formats/torch_pt.h"

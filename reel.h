// reel: a define-by-run autograd tensor library. The one header users include.
#pragma once
#include "tensor/tensor.h"      // Tensor, creation, random numbers
#include "autograd/grad_mode.h" // NoGradGuard, no_grad
#include "autograd/ops.h"       // the differentiable ops and C++ operators
#include "autograd/tape.h"      // the tape: backward, autograd::grad, printing

// reel: a define-by-run autograd tensor library. The one header users include.
#pragma once
#include "tensor/tensor.h"      // Tensor, creation, random numbers (Generator, per-thread default generators)
#include "tensor/parallel.h"    // set_num_threads, set_flush_subnormals
#include "tensor/check.h"       // REEL_CHECK: libtorch's TORCH_CHECK for your own code
#include "cuda/cuda.h"          // cuda::is_available, memory_stats, pinned_empty, set_allow_tf32, set_cudnn_rnn (every build)
#include "cpu/memory.h"         // cpu::memory_stats, reset_peak_memory_stats, empty_cache: the CPU allocator
#include "autograd/autocast.h"  // AutocastGuard: mixed precision for a scope
#include "autograd/autocast_products.h" // set_cpu_autocast_bf16_products: bf16 products only where they pay
#include "autograd/grad_mode.h" // NoGradGuard, no_grad
#include "autograd/ops.h"       // the differentiable ops and C++ operators
#include "autograd/ops_rnn.h"   // rnn_layer, rnn: recurrent layers (RNN, LSTM, GRU), variable lengths
#include "autograd/ops_attention.h" // scaled_dot_product_attention: fused, flash-attention style (O(T) memory)
#include "autograd/tape.h"      // the tape: backward, autograd::grad, printing
#include "autograd/op_args_types.h" // what each op keeps on its tape entry, typed: node.args<ConvParams>()
#include "autograd/hooks.h"     // post-accumulate-grad and end-of-backward hooks (what DistributedDataParallel uses)
#include "formats/safetensors.h" // safetensors files: save, load, parse
#include "formats/torch_pt.h"   // PyTorch's .pt/.pth files (torch.save): torch_pt::load, parse
#include "tensor/atomic_file.h" // write_file_atomically: the one way reel writes a file (temporary, fsync, rename)
#include "formats/detect.h"     // formats::detect_file: which of those a file holds, from its first bytes
#include "nn/module.h"          // nn::Module: parameters, buffers, children, train/eval, to, save/load
#include "nn/layers.h"          // nn::Linear, Conv2d, pooling, BatchNorm, LayerNorm, Dropout, activations, Sequential, Embedding
#include "nn/rnn.h"             // nn::RNN, GRU, LSTM, RNNCell, GRUCell, LSTMCell
#include "nn/attention.h"        // nn::MultiheadAttention, nn::TransformerEncoderLayer (PyTorch names)
#include "nn/containers.h"      // nn::ModuleList, nn::ModuleDict: layers chosen at run time
#include "nn/activations.h"     // nn::SiLU, ELU, LeakyReLU, Softplus, Mish, Hardswish, Hardtanh, ReLU6, Hardsigmoid, Threshold, Softmax
#include "nn/loss.h"            // nn::CrossEntropyLoss, NLLLoss, MSELoss, BCEWithLogitsLoss
#include "nn/losses.h"          // nn::L1Loss, SmoothL1Loss, HuberLoss, KLDivLoss, BCELoss, CosineEmbeddingLoss (+ functional)
#include "nn/norm_layers.h"     // nn::GroupNorm, InstanceNorm2d, Identity, Dropout2d
#include "nn/conv_layers.h"     // nn::Conv1d, ConvTranspose2d, MaxPool1d, AvgPool1d, Upsample
#include "nn/small_layers.h"    // nn::Functional, Unflatten, Dropout1d/3d, AlphaDropout, LogSoftmax, padding layers
#include "nn/models/resnet.h"   // nn::models::resnet18/34/50: torchvision's ResNets (names, init), features()
#include "nn/models/densenet.h" // nn::models::densenet121: torchvision's DenseNet
#include "nn/init.h"            // nn::init: xavier/kaiming/uniform/normal/constant initialisers
#include "nn/functional.h"      // nn::functional: PyTorch's F:: names (relu, conv2d, cross_entropy, ...), fused forms
#include "nn/utils.h"           // nn::utils::clip_grad_norm_, clip_grad_value_ (libtorch's spellings)
#include "optim/optimizer.h"    // optim::Optimizer base, param groups, clip_grad_norm
#include "optim/optimizers.h"   // optim::SGD, Adam, AdamW, Adamax, RMSprop, Adagrad
#include "optim/scheduler.h"    // optim::StepLR, MultiStepLR, CosineAnnealingLR, OneCycleLR, LinearWarmup
#include "optim/lr_schedulers.h" // optim::LambdaLR, ExponentialLR, LinearLR, SequentialLR, ReduceLROnPlateau
#include "optim/averaged_model.h" // optim::AveragedModel: SWA or EMA averages of the weights
#include "optim/grad_scaler.h"   // optim::GradScaler: loss scaling for mixed precision (scale, unscale, step, update)
#include "autograd/function.h"  // autograd::Function: a user op with its own forward and backward
#include "autograd/checkpoint.h" // autograd::checkpoint: recompute a block in backward, random numbers replayed
#include "debug/debug.h"        // debug::print_tape/tape_dot, op hooks, REEL_BREAK_ON, step and anomaly modes, Profiler
#include "data/dataloader.h"    // data::Dataset, TensorDataset, DataLoader: seeded shuffle, workers, prefetch, device copy
#include "data/mnist.h"         // data::load_mnist and the IDX reader (gzip or plain)
#include "data/cifar.h"         // data::load_cifar10 (binary version)
#include "data/transforms.h"    // data::normalize, random_crop, random_horizontal_flip
#include "data/sampler.h"       // data::RandomSampler, SubsetRandomSampler, WeightedRandomSampler, BatchSampler
#include "data/dataset_ops.h"   // data::Subset, ConcatDataset, random_split, TransformDataset, Compose
#include "data/datasets.h"      // data::datasets::Dataset<Self>, .map(transforms::Normalize<>, Stack<>): libtorch's pipeline
#include "log/summary_writer.h" // SummaryWriter: scalars, histograms, images, text for TensorBoard
#include "log/png.h"            // encode_png, write_png: 8-bit images as PNG
#include "checkpoint/checkpoint.h" // checkpoint::save/load: a whole training run (model, optimizer, scheduler, generators, loader position, step) in one file
#ifdef REEL_HAS_DIST  // programs linked with reel::dist (libreel_dist, built when MPI is found)
#include "dist/dist.h"          // dist::init, ProcessGroup collectives, DistributedDataParallel, save_on_rank0
#endif

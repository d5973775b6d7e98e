// dist/: data-parallel training across processes and machines (link reel::dist).
#pragma once
#include "process_group.h"  // dist::init, ProcessGroup: all_reduce, broadcast, all_gather, reduce_scatter, barrier
#include "ddp.h"              // dist::DistributedDataParallel: bucketed gradient all-reduce overlapping backward, no_sync
#include "checkpoint_set.h"   // dist::CheckpointSets: per-step checkpoint sets, complete once every rank wrote (MANIFEST)

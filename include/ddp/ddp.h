// The ddp library: distributed data-parallel training for libtorch.
#pragma once

#include <ddp/backend.h>
#include <ddp/backends/gloo.h>
#include <ddp/backends/hierarchical.h>
#include <ddp/backends/round_robin.h>
#include <ddp/backends/shm.h>
#include <ddp/checkpoint.h>
#include <ddp/elastic.h>
#include <ddp/errors.h>
#include <ddp/flight_recorder.h>
#include <ddp/grad_ready_hook.h>
#include <ddp/hooks.h>
#include <ddp/init.h>
#include <ddp/join.h>
#include <ddp/process_group.h>
#include <ddp/distributed_data_parallel.h>
#include <ddp/reducer.h>
#include <ddp/sync_batchnorm.h>
#include <ddp/timeline.h>
#include <ddp/work.h>
#include <ddp/zero.h>

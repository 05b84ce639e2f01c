// Every built-in communication hook.
#pragma once

#include <ddp/comm_hook.h>
#include <ddp/hooks/adaptive_compression.h>
#include <ddp/hooks/debugging_hooks.h>
#include <ddp/hooks/default_hooks.h>
#include <ddp/hooks/powersgd.h>

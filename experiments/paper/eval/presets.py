"""The presets of `experiments/paper/evaluate.py paper`: what each experiment
runs.
Models' own defaults (batch, image size, sequence length) are in
bench/models/models.h and models.py."""

PRESETS = {
    "quick": {
        "links": ["loopback", "10g"],
        "run_timeout_s": 120,
        "rounds": 1, "iters": 6, "warmup": 2,
        "split_total": "6M", "split_sizes": "4K,16K,64K,256K,1M,6M", "split_rounds": 2,
        "breakdown_models": ["mlp", "resnet18", "bert_small"],
        "bucket_models": ["resnet18"], "bucket_links": ["10g"],
        "buckets_mb": [0, 1, 5, 10, 25, 50, 100, 200],
        "scaling_model": "mlp", "world_sizes": [1, 2, 3, 4],
        "nosync_model": "mlp", "sync_every": [1, 2, 4, 8], "converge_steps": 240,
        "rr_model": "mlp", "process_groups": [1, 3, 5],
        "variants_model": "bert_small", "variants_iters": 4,
        "hooks_model": "mlp", "hooks": ["none", "fp16", "bf16", "powersgd4"],
    },
    # Every experiment once, as small as it goes: checks the harness, not the numbers.
    "smoke": {
        "links": ["loopback", "10g"],
        "run_timeout_s": 60,
        "rounds": 1, "iters": 2, "warmup": 1,
        "split_total": "1M", "split_sizes": "64K,1M", "split_rounds": 1,
        "breakdown_models": ["mlp"], "bucket_models": ["mlp"], "bucket_links": ["10g"],
        "buckets_mb": [0, 25],
        "scaling_model": "mlp", "world_sizes": [1, 3],
        "nosync_model": "mlp", "sync_every": [1, 2], "converge_steps": 16,
        "rr_model": "mlp", "process_groups": [1, 3],
        "variants_model": "mlp", "variants_iters": 2,
        "hooks_model": "mlp", "hooks": ["none", "bf16"],
    },
    "full": {
        "links": ["loopback", "10g", "1g"],
        "run_timeout_s": 900,
        "rounds": 3, "iters": 10, "warmup": 3,
        "split_total": "60M", "split_sizes": "1K,4K,16K,64K,256K,1M,4M,16M,60M",
        "split_rounds": 5,
        "breakdown_models": ["mlp", "resnet18", "bert_small", "resnet50", "bert_base"],
        "bucket_models": ["resnet50", "bert_base"], "bucket_links": ["loopback", "10g"],
        "buckets_mb": [0, 1, 5, 10, 25, 50, 100, 200],
        "scaling_model": "resnet18", "world_sizes": [1, 2, 3, 4],
        "nosync_model": "resnet18", "sync_every": [1, 2, 4, 8], "converge_steps": 480,
        "rr_model": "bert_small", "process_groups": [1, 3, 5],
        "variants_model": "bert_small", "variants_iters": 8,
        "hooks_model": "resnet18",
        "hooks": ["none", "fp16", "bf16", "powersgd1", "powersgd4", "batched_powersgd1"],
    },
}

#!/usr/bin/python3
"""The models of the evaluation harness: the Python twin of bench/models/models.h.

Every model is defined as its C++ twin (bench/models/mlp.h, resnet.h,
bert.h; the mlp here, the others in resnet.py and bert.py): the same modules
in the same registration order (so the same parameter names, shapes and
order) and built in the same order with the modules' default initialization,
so that the same seed gives the same weights in libtorch and PyTorch. `bench/evaluate.py models` compares

    python3 bench/models/models.py --print NAME [--seed S]
    build/bench/ddp_bench models --print NAME [--seed S]

(one line per parameter: "index name [d0, d1, ...] checksum", the checksum
the sum of its float64 values, then the total).

    mlp         16 x Linear(1024, 1024), ReLU between; MSE loss
    resnet18    ResNet-18, CIFAR stem (3x3 conv, no max-pool), 10 classes
    resnet50    torchvision's ResNet-50 (Bottleneck [3, 4, 6, 3], ImageNet
                stem), 1000 classes; default init, not torchvision's re-init
    bert_small  BERT encoder + pooler + Linear(hidden, 2): 4 layers, hidden
                256, 4 heads, FFN 1024, vocab 30522, 512 positions
    bert_base   the same at BERT-base size (12 layers, 768, 12 heads, 3072)

All but mlp use cross-entropy. BERT runs with dropout 0 (see bert.h).

From another script in bench/:

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "models"))
    import models
    opts = models.with_defaults({"name": "resnet50", "seed": 0})
    net = models.make_model(opts)
    x, y = models.make_batch(opts, data_seed=1)
    loss = models.model_loss(opts, net(x), y)

Use Debian's /usr/bin/python3 (its python3-torch is the libtorch that
ddp_bench links).
"""

import argparse
import ctypes

import torch
import torch.nn as nn
import torch.nn.functional as F

from bert import BertForSequenceClassification, bert_config  # noqa: E402  (bench/models/bert.py)
from resnet import ResNet18, ResNet50, resnet_classes  # noqa: E402  (bench/models/resnet.py)

MODEL_NAMES = ("mlp", "resnet18", "resnet50", "bert_small", "bert_base", "mlp4096")

# Per-rank defaults (0: does not apply). Keep in step with kModels in
# bench/models/models.cpp.
DEFAULTS = {
    "mlp": {"batch": 32, "image_size": 0, "seq_len": 0},
    "resnet18": {"batch": 8, "image_size": 32, "seq_len": 0},
    "resnet50": {"batch": 8, "image_size": 128, "seq_len": 0},
    "bert_small": {"batch": 8, "image_size": 0, "seq_len": 128},
    "bert_base": {"batch": 2, "image_size": 0, "seq_len": 128},
    "mlp4096": {"batch": 256, "image_size": 0, "seq_len": 0},
}

MLP_WIDTH = 1024


def mlp_width(name):
    """1024, or 4096 for mlp4096 (the GPU benchmark's)."""
    return 4096 if name == "mlp4096" else MLP_WIDTH


class ModelOptions:
    """As ddp_bench::ModelOptions (0 = the model's default)."""

    FIELDS = ("name", "batch", "image_size", "seq_len", "seed")

    def __init__(self, name="", batch=0, image_size=0, seq_len=0, seed=0):
        self.name, self.batch, self.image_size = name, int(batch), int(image_size)
        self.seq_len, self.seed = int(seq_len), int(seed)

    def __repr__(self):
        return "ModelOptions(%s)" % ", ".join("%s=%r" % (f, getattr(self, f)) for f in self.FIELDS)


def _get(opts, key):
    if isinstance(opts, dict):
        v = opts.get(key)
        if v is None and key == "name":
            v = opts.get("model")
    else:
        v = getattr(opts, key, None)
        if v is None and key == "name":
            v = getattr(opts, "model", None)
    return ("" if key == "name" else 0) if v is None else v


def with_defaults(opts):
    """A ModelOptions with the zeros filled in, from a dict, a ModelOptions or
    an argparse-like object (fields name (or model), batch, image_size,
    seq_len, seed; missing ones are 0). ValueError naming the known models
    for an unknown name."""
    o = ModelOptions(*(_get(opts, f) for f in ModelOptions.FIELDS))
    if o.name not in DEFAULTS:
        raise ValueError("unknown model '%s' (known: %s)" % (o.name, ", ".join(MODEL_NAMES)))
    for field in ("batch", "image_size", "seq_len"):
        v = getattr(o, field)
        if v < 0:
            raise ValueError("%s: %s must be positive, got %d" % (o.name, field, v))
        if v == 0:
            setattr(o, field, DEFAULTS[o.name][field])
    if o.name.startswith("bert") and o.seq_len > bert_config(o.name)["max_positions"]:
        raise ValueError("%s: seq_len %d exceeds its %d positions"
                         % (o.name, o.seq_len, bert_config(o.name)["max_positions"]))
    return o


# --- mlp (bench/models/mlp.h) ----------------------------------------------

def make_mlp(layers=16, width=MLP_WIDTH):
    mods = []
    for i in range(layers):
        mods.append(nn.Linear(width, width))
        if i + 1 < layers:
            mods.append(nn.ReLU())
    return nn.Sequential(*mods)  # parameters "0.weight", "0.bias", "2.weight", ...


# --- the registry (bench/models/models.cpp) ---------------------------------

def make_model(opts):
    """torch.manual_seed(seed), then the model, in training mode."""
    o = with_defaults(opts)
    torch.manual_seed(o.seed)
    if o.name.startswith("mlp"):
        return make_mlp(16, mlp_width(o.name))
    if o.name == "resnet18":
        return ResNet18(resnet_classes(o.name))
    if o.name == "resnet50":
        return ResNet50(resnet_classes(o.name))
    return BertForSequenceClassification(bert_config(o.name))


def make_batch(opts, data_seed):
    """torch.manual_seed(data_seed), then (input, target) as make_batch in models.h."""
    o = with_defaults(opts)
    torch.manual_seed(data_seed)
    if o.name.startswith("mlp"):
        w = mlp_width(o.name)
        return torch.randn(o.batch, w), torch.randn(o.batch, w)
    if o.name.startswith("resnet"):
        return (torch.randn(o.batch, 3, o.image_size, o.image_size),
                torch.randint(0, resnet_classes(o.name), (o.batch,), dtype=torch.long))
    c = bert_config(o.name)
    return (torch.randint(0, c["vocab_size"], (o.batch, o.seq_len), dtype=torch.long),
            torch.randint(0, c["classes"], (o.batch,), dtype=torch.long))


def model_loss(opts, out, target):
    """MSE for mlp, cross-entropy (mean over the batch) for the others."""
    name = _get(opts, "name")
    if name.startswith("mlp"):
        return F.mse_loss(out, target)
    if name not in DEFAULTS:
        with_defaults(opts)  # the unknown-name error
    return F.cross_entropy(out, target)


def describe(opts):
    """One line, defaults filled in: "resnet50, batch 4/rank, 3x64x64 images"."""
    o = with_defaults(opts)
    s = "%s, batch %d/rank, " % (o.name, o.batch)
    if o.name.startswith("mlp"):
        return s + "%d features" % mlp_width(o.name)
    if o.name.startswith("resnet"):
        return s + "3x%dx%d images" % (o.image_size, o.image_size)
    return s + "%d tokens" % o.seq_len


# --- command line -----------------------------------------------------------

def limit_openblas_threads(threads):
    """Debian's torch multiplies matrices in OpenBLAS (pthreads build), whose
    own thread pool torch.set_num_threads does not limit (ddp_bench does the
    same: bench_util.h). Returns the count set, or 0 without OpenBLAS."""
    try:
        lib = ctypes.CDLL("libopenblas.so.0")  # the copy torch already loaded
        lib.openblas_set_num_threads(threads)
        return lib.openblas_get_num_threads()
    except (OSError, AttributeError):
        return 0


def print_params(o):
    with torch.no_grad():
        net = make_model(o)
        total = 0
        index = 0
        for index, (name, p) in enumerate(net.named_parameters()):
            print("%d %s [%s] %.9e" % (index, name, ", ".join(str(d) for d in p.shape),
                                       p.double().sum().item()))
            total += p.numel()
        print("total %d parameters in %d tensors" % (total, index + 1))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--print", dest="print_name", metavar="NAME", required=True,
                   help="one line per parameter: index name [shape] checksum, then the total")
    p.add_argument("--seed", type=int, default=0, help="the weights' seed")
    args = p.parse_args()
    torch.set_num_threads(1)
    limit_openblas_threads(1)
    try:
        o = with_defaults({"name": args.print_name, "seed": args.seed})
    except ValueError as e:
        p.error(str(e))
    print_params(o)


if __name__ == "__main__":
    main()

"""The resnets of the benchmark models (models.py), twins of bench/models/resnet.h:
ResNet-18 with a CIFAR stem and torchvision's ResNet-50, with the same modules
in the same registration order as the C++ ones."""

import torch
import torch.nn as nn
import torch.nn.functional as F


def downsample(cin, cout, stride):
    """A block's shortcut where it changes the shape (1x1 conv, BN); None where it keeps it."""
    if stride == 1 and cin == cout:
        return None
    return nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = downsample(cin, cout, stride)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


class Bottleneck(nn.Module):
    """torchvision's Bottleneck (stride on the 3x3 conv); the downsample is
    built after the block's own layers (torchvision builds it first)."""

    expansion = 4

    def __init__(self, cin, width, stride):
        super().__init__()
        out = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.downsample = downsample(cin, out, stride)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


class _ResNet(nn.Module):
    """What the ResNets share (resnet.h's ResNetImpl): the stem (conv1 from 3
    to STEM_CHANNELS channels, bn1, ReLU; then a 3x3/2 max-pool where
    `max_pool`), four stages layer1..layer4 of WIDTHS that the subclass adds,
    global average pooling and the classifier fc."""

    STEM_CHANNELS = 64
    WIDTHS = (64, 128, 256, 512)

    def __init__(self, kernel, stride, padding, max_pool):
        super().__init__()
        self.conv1 = nn.Conv2d(3, self.STEM_CHANNELS, kernel, stride=stride, padding=padding,
                               bias=False)
        self.bn1 = nn.BatchNorm2d(self.STEM_CHANNELS)
        self.max_pool = max_pool

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        if self.max_pool:
            x = F.max_pool2d(x, kernel_size=3, stride=2, padding=1)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, (1, 1)), 1))


class ResNet18(_ResNet):
    """ResNet-18 with a CIFAR-style stem (3x3 conv, stride 1, no max-pool)."""

    def __init__(self, classes=10):
        super().__init__(kernel=3, stride=1, padding=1, max_pool=False)
        cin = self.STEM_CHANNELS
        for i, c in enumerate(self.WIDTHS):
            setattr(self, "layer%d" % (i + 1),
                    nn.Sequential(BasicBlock(cin, c, 1 if i == 0 else 2), BasicBlock(c, c, 1)))
            cin = c
        self.fc = nn.Linear(512, classes)


class ResNet50(_ResNet):
    """torchvision's resnet50() structure and names, default initialization."""

    def __init__(self, classes=1000):
        super().__init__(kernel=7, stride=2, padding=3, max_pool=True)
        blocks = (3, 4, 6, 3)
        cin = self.STEM_CHANNELS
        for i, width in enumerate(self.WIDTHS):
            layer = []
            for b in range(blocks[i]):
                layer.append(Bottleneck(cin, width, 2 if b == 0 and i > 0 else 1))
                cin = width * Bottleneck.expansion
            setattr(self, "layer%d" % (i + 1), nn.Sequential(*layer))
        self.fc = nn.Linear(512 * Bottleneck.expansion, classes)


def resnet_classes(name):
    return 1000 if name == "resnet50" else 10

#!/usr/bin/python3
"""Writes torchvision 0.14's resnet18/34/50 and densenet121 for test/test_models.cpp.

For each model: OUT/<name>.safetensors holds the state dict (f32, num_batches_tracked
i64) of the model built with a fixed seed, its batch-norm running statistics randomised
(so eval mode is a real test), and OUT/<name>.ref.safetensors the input, the logits and
the pooled features (the vector before the classifier) in eval mode; for resnet18 and
resnet50 also OUT/<name>.pt, the same state dict as torch.save writes it. Run by ctest
(test/models/run.sh), never committed: ResNet-50's weights are 100 MB.

    /usr/bin/python3 test/models/torchvision_models.py OUT
"""
import os
import sys

import torch
import torch.nn.functional as F
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
from safetensors_write import save_safetensors  # noqa: E402


def features(model, x):
    if isinstance(model, torchvision.models.DenseNet):
        return torch.flatten(F.adaptive_avg_pool2d(F.relu(model.features(x)), 1), 1)
    m = model
    y = m.maxpool(m.relu(m.bn1(m.conv1(x))))
    y = m.layer4(m.layer3(m.layer2(m.layer1(y))))
    return torch.flatten(m.avgpool(y), 1)


def main(out):
    os.makedirs(out, exist_ok=True)
    for i, name in enumerate(["resnet18", "resnet34", "resnet50", "densenet121"]):
        torch.manual_seed(i)
        model = getattr(torchvision.models, name)(num_classes=10)
        with torch.no_grad():
            for mod in model.modules():
                if isinstance(mod, torch.nn.BatchNorm2d):
                    mod.running_mean.uniform_(-0.2, 0.2)
                    mod.running_var.uniform_(0.5, 1.5)
                    mod.weight.uniform_(0.5, 1.5)
                    mod.bias.uniform_(-0.2, 0.2)
                    mod.num_batches_tracked.fill_(7)
        model.eval()
        x = torch.randn(2, 3, 64, 64)
        with torch.no_grad():
            logits = model(x)
            pooled = features(model, x)
        save_safetensors(os.path.join(out, name + ".safetensors"), model.state_dict())
        if name in ("resnet18", "resnet50"):  # torch.save's format, for torch_pt (test_torch_pt.cpp)
            torch.save(model.state_dict(), os.path.join(out, name + ".pt"))
        save_safetensors(os.path.join(out, name + ".ref.safetensors"),
                         {"input": x, "logits": logits, "features": pooled})
        print(f"{name}: {sum(p.numel() for p in model.parameters())} parameters")


if __name__ == "__main__":
    main(sys.argv[1])

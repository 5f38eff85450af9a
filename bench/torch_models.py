"""torchvision's VGG16 / VGG19 and ViT-B/16 in plain `torch.nn`: the references of
bench_extract.py and tests/test_feature_extractors.py, without torchvision (which pins a CUDA
torch of several GB).

Written from torchvision's published architectures (`torchvision.models.vgg`,
`torchvision.models.vision_transformer`): the modules carry torchvision's names, so
`state_dict()` holds exactly the keys and shapes of `torchvision.models.vgg16()` /
`vgg19()` / `vit_b_16()` (what `vqajax/features/weights.py` maps), and the parameters are
initialised by torchvision's rules. Eval mode only matters for dropout (0.5 in VGG's
classifier, 0 in ViT). Needs torch: `pip install -e '.[bench]'` (or the test extra).
"""

import math
from collections import OrderedDict

import torch
from torch import nn

# "M" is a 2x2 max-pool; a number is a 3x3 convolution (padding 1) with that many outputs and a ReLU.
VGG16 = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")
VGG19 = (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M")


class VGG(nn.Module):
  """`features` (conv / ReLU / max-pool, indexed as torchvision's), `avgpool` to 7x7, then
  `classifier`: Linear(25088, 4096), ReLU, Dropout, Linear(4096, 4096), ReLU, Dropout,
  Linear(4096, 1000) (indices 0-6; fc6 = 0, fc7 = 3)."""

  def __init__(self, plan, classes: int = 1000):
    super().__init__()
    layers, channels = [], 3
    for step in plan:
      if step == "M":
        layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
      else:
        layers += [nn.Conv2d(channels, step, kernel_size=3, padding=1), nn.ReLU(inplace=True)]
        channels = step
    self.features = nn.Sequential(*layers)
    self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
    self.classifier = nn.Sequential(
        nn.Linear(channels * 7 * 7, 4096), nn.ReLU(True), nn.Dropout(0.5),
        nn.Linear(4096, 4096), nn.ReLU(True), nn.Dropout(0.5), nn.Linear(4096, classes))
    for module in self.modules():  # torchvision's initialisation
      if isinstance(module, nn.Conv2d):
        nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
        nn.init.zeros_(module.bias)
      elif isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, 0, 0.01)
        nn.init.zeros_(module.bias)

  def forward(self, x):
    return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def vgg16() -> VGG:
  return VGG(VGG16)


def vgg19() -> VGG:
  return VGG(VGG19)


class MLPBlock(nn.Sequential):
  """Linear (0), GELU (1), Dropout (2), Linear (3), Dropout (4): torchvision's `MLP` indices."""

  def __init__(self, width: int, hidden: int, dropout: float):
    super().__init__(nn.Linear(width, hidden), nn.GELU(), nn.Dropout(dropout), nn.Linear(hidden, width),
                     nn.Dropout(dropout))
    for module in (self[0], self[3]):
      nn.init.xavier_uniform_(module.weight)
      nn.init.normal_(module.bias, std=1e-6)


class EncoderBlock(nn.Module):
  """Pre-norm transformer block: x + attention(ln_1(x)), then + mlp(ln_2(.))."""

  def __init__(self, heads: int, width: int, hidden: int, dropout: float, attention_dropout: float):
    super().__init__()
    self.ln_1 = nn.LayerNorm(width, eps=1e-6)
    self.self_attention = nn.MultiheadAttention(width, heads, dropout=attention_dropout, batch_first=True)
    self.dropout = nn.Dropout(dropout)
    self.ln_2 = nn.LayerNorm(width, eps=1e-6)
    self.mlp = MLPBlock(width, hidden, dropout)

  def forward(self, x):
    y = self.ln_1(x)
    x = x + self.dropout(self.self_attention(y, y, y, need_weights=False)[0])
    return x + self.mlp(self.ln_2(x))


class Encoder(nn.Module):
  """Position embeddings added, the blocks (`layers.encoder_layer_{i}`), a final LayerNorm."""

  def __init__(self, tokens: int, depth: int, heads: int, width: int, hidden: int, dropout: float,
               attention_dropout: float):
    super().__init__()
    self.pos_embedding = nn.Parameter(torch.empty(1, tokens, width).normal_(std=0.02))
    self.dropout = nn.Dropout(dropout)
    self.layers = nn.Sequential(OrderedDict(
        (f"encoder_layer_{i}", EncoderBlock(heads, width, hidden, dropout, attention_dropout)) for i in range(depth)))
    self.ln = nn.LayerNorm(width, eps=1e-6)

  def forward(self, x):
    return self.ln(self.layers(self.dropout(x + self.pos_embedding)))


class ViT(nn.Module):
  """Patches by a strided convolution (`conv_proj`), a class token in front, the encoder;
  `heads.head` makes the logits from the class token. `tokens` gives the encoder's output
  (class token first, then the patches row by row), which the extractors read."""

  def __init__(self, image_size: int = 224, patch: int = 16, depth: int = 12, heads: int = 12, width: int = 768,
               hidden: int = 3072, dropout: float = 0.0, attention_dropout: float = 0.0, classes: int = 1000):
    super().__init__()
    self.patch, self.width = patch, width
    self.conv_proj = nn.Conv2d(3, width, kernel_size=patch, stride=patch)
    self.class_token = nn.Parameter(torch.zeros(1, 1, width))
    self.encoder = Encoder((image_size // patch) ** 2 + 1, depth, heads, width, hidden, dropout, attention_dropout)
    self.heads = nn.Sequential(OrderedDict(head=nn.Linear(width, classes)))
    # torchvision's: the patch projection by fan-in, the classifier from zeros.
    nn.init.trunc_normal_(self.conv_proj.weight, std=math.sqrt(1 / (3 * patch * patch)))
    nn.init.zeros_(self.conv_proj.bias)
    nn.init.zeros_(self.heads.head.weight)
    nn.init.zeros_(self.heads.head.bias)

  def tokens(self, x):
    patches = self.conv_proj(x).flatten(2).transpose(1, 2)  # [n, width, h, w] -> [n, h * w, width]
    return self.encoder(torch.cat([self.class_token.expand(x.shape[0], -1, -1), patches], dim=1))

  def forward(self, x):
    return self.heads(self.tokens(x)[:, 0])


def vit_b_16() -> ViT:
  return ViT()

"""The oracle of vqajax/nn/paligemma_seg.py's mask decoder: the VQ-VAE decoder of PaliGemma's
`vae-oid.npz` in numpy, written from the architecture in PyTorch's terms. It reads the file's
arrays as PyTorch stores them (Conv2d weights [out, in, kh, kw], ConvTranspose2d [in, out, kh, kw],
the modules' names in a Sequential `decoder`, ReLUs in its odd places) and applies each layer by
its definition, in float64. `random_npz` writes a file with the published arrays' names and shapes.
"""

import numpy as np

CODEBOOK = "_vq_vae._embedding"  # [128 codes, 512]
CONVS = [("decoder.0", 512, 128, 1)] + [  # (name, in, out, kernel) of the stride-1 convolutions
    (f"decoder.{block}.net.{i}", 128, 128, kernel) for block in (2, 3) for i, kernel in ((0, 3), (2, 3), (4, 1))
] + [("decoder.12", 16, 1, 1)]
UPSAMPLING = [("decoder.4", 128, 128), ("decoder.6", 128, 64), ("decoder.8", 64, 32), ("decoder.10", 32, 16)]


def shapes() -> dict[str, tuple[int, ...]]:
  """Every array the decoder reads and its shape."""
  out = {CODEBOOK: (128, 512)}
  for name, cin, cout, kernel in CONVS:
    out[f"{name}.weight"], out[f"{name}.bias"] = (cout, cin, kernel, kernel), (cout,)
  for name, cin, cout in UPSAMPLING:
    out[f"{name}.weight"], out[f"{name}.bias"] = (cin, cout, 4, 4), (cout,)
  return out


def random_arrays(seed: int = 0) -> dict[str, np.ndarray]:
  """Random float32 arrays of `shapes()`, each weight scaled by 1 / sqrt(its fan-in) (a stride-2 4 x 4
  ConvTranspose2d: 4 taps an input channel) so that the activations stay near 1."""
  rng = np.random.default_rng(seed)
  transposed = tuple(f"{name}." for name, *_ in UPSAMPLING)
  out = {}
  for name, shape in shapes().items():
    fan_in = 1 if len(shape) < 4 else shape[0] * 4 if name.startswith(transposed) else int(np.prod(shape[1:]))
    out[name] = (rng.normal(size=shape) / np.sqrt(fan_in)).astype(np.float32)
  return out


def conv(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
  """Conv2d, stride 1, zero padding (kernel - 1) / 2: out[o, i, j] = b[o] + sum w[o, c, u, v] x[c, i + u - p, j + v - p]."""
  k = weight.shape[-1]
  p = (k - 1) // 2
  _, h, w = x.shape
  padded = np.pad(x, ((0, 0), (p, p), (p, p)))
  out = np.zeros((weight.shape[0], h, w)) + bias[:, None, None]
  for u in range(k):
    for v in range(k):
      out += np.einsum("oc,chw->ohw", weight[:, :, u, v], padded[:, u:u + h, v:v + w])
  return out


def conv_transpose(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
  """ConvTranspose2d(kernel 4, stride 2, padding 1): each input pixel (i, j) adds w[c, o, u, v] x[c, i, j] at
  (2 i + u - 1, 2 j + v - 1) of the output (positions outside it dropped)."""
  _, h, w = x.shape
  full = np.zeros((weight.shape[1], 2 * h + 2, 2 * w + 2))
  for u in range(4):
    for v in range(4):
      full[:, u:u + 2 * h:2, v:v + 2 * w:2] += np.einsum("co,chw->ohw", weight[:, :, u, v], x)
  return full[:, 1:1 + 2 * h, 1:1 + 2 * w] + bias[:, None, None]


def decode(arrays: dict[str, np.ndarray], codes: np.ndarray) -> np.ndarray:
  """[N, 16] codes -> [N, 64, 64] mask logits."""
  a = {k: np.asarray(v, np.float64) for k, v in arrays.items()}
  relu = lambda x: np.maximum(x, 0)  # noqa: E731
  out = []
  for row in codes:
    x = a[CODEBOOK][row].reshape(4, 4, -1).transpose(2, 0, 1)  # code k at row k // 4, column k % 4
    x = relu(conv(x, a["decoder.0.weight"], a["decoder.0.bias"]))
    for block in (2, 3):
      net = lambda i, y: conv(y, a[f"decoder.{block}.net.{i}.weight"], a[f"decoder.{block}.net.{i}.bias"])  # noqa: E731
      x = x + net(4, relu(net(2, relu(net(0, x)))))
    for name, _, _ in UPSAMPLING:
      x = relu(conv_transpose(x, a[f"{name}.weight"], a[f"{name}.bias"]))
    out.append(conv(x, a["decoder.12.weight"], a["decoder.12.bias"])[0])
  return np.stack(out)

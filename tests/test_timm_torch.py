"""The outside party for test_it_parity_torch's timm case: a ViT written the
way timm's VisionTransformer is (its module and tensor names, a conv patch
embedding, a [1, 1, D] class token and [1, N+1, D] positions, qkv and proj
attention, fc1/fc2 MLP, a final norm and a head on the class token), in
plain torch (timm itself is not imported, nor bf's code read). Its
state_dict is written by safetensors.torch in BF16, as a timm user saves one.

  test_timm_torch.py write DUMP_DIR OUT.safetensors
      a seeded model of the shape in DUMP_DIR/dump.json (image size, patch,
      layers, width, heads, classes) written to OUT in BF16
  test_timm_torch.py check DUMP_DIR WEIGHTS.safetensors
      DUMP_DIR: what `bfworker dump` wrote of that config with
      init.from WEIGHTS and init.map timm. The model loads WEIGHTS (BF16,
      upcast: the same floats bf loads), runs DUMP_DIR's batch (its ids are
      the pixels) in float64 and compares its logits with bf's:
      max |bf - torch| <= 1e-4 * max |torch|, i.e. far inside one BF16 rounding
      step (2^-8 relative: the same model in F32 weights differs from its
      BF16 copy by about that, and the check says by how much, so the
      tolerance separates "same weights" from "weights off by a rounding").

The settings that timm's defaults differ in and bf's map does not change
(docs/checkpoints.md "init.map: timm") are set as bf has them: LayerNorm
eps 1e-5, the tanh GELU, pixels v * 2/255 - 1 fed to the patch embedding,
the class token pooled. Exit status: 0 match, 1 mismatch (or a dump without
the loaded weights), 2 usage."""
import json
import os
import sys

for p in os.environ.get("BF_PYDEPS", "").split(os.pathsep):
    if p:
        sys.path.append(p)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402


class PatchEmbed(nn.Module):
    def __init__(self, patch, dim):
        super().__init__()
        self.proj = nn.Conv2d(1, dim, kernel_size=patch, stride=patch)

    def forward(self, x):  # [B, 1, H, W] -> [B, N, D]
        return self.proj(x).flatten(2).transpose(1, 2)


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        hd = C // self.heads
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, hd).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        att = (q @ k.transpose(-2, -1)) * hd ** -0.5
        x = att.softmax(dim=-1) @ v
        return self.proj(x.transpose(1, 2).reshape(B, N, C))


class Mlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-5)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-5)
        self.mlp = Mlp(dim, 4 * dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    def __init__(self, img_h, img_w, patch, depth, dim, heads, classes):
        super().__init__()
        n = (img_h // patch) * (img_w // patch)
        self.img_h, self.img_w = img_h, img_w
        self.patch_embed = PatchEmbed(patch, dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, n + 1, dim))
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(dim, eps=1e-5)
        self.head = nn.Linear(dim, classes)

    def forward(self, pixels):  # [B, H*W] values 0..255
        B = pixels.shape[0]
        img = pixels.view(B, 1, self.img_h, self.img_w) * (2.0 / 255.0) - 1.0
        x = self.patch_embed(img)
        x = torch.cat([self.cls_token.expand(B, -1, -1), x], dim=1) + self.pos_embed
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x)[:, 0])


def model_of(dump_dir):
    with open(os.path.join(dump_dir, "dump.json")) as f:
        sh = json.load(f)["shape"]
    if sh["model"] != "vit" or sh["avit"]:
        raise SystemExit("%s: not a plain vit dump (model %s)" % (dump_dir, sh["model"]))
    return VisionTransformer(sh["image_h"], sh["image_w"], sh["patch"], sh["layers"],
                             sh["d_model"], sh["heads"], sh["n_classes"])


def seeded_weights(m):
    """The model's F32 weights, seeded, large enough that every layer shapes
    the logits (norm scales around 1)."""
    torch.manual_seed(1234)
    w = {}
    for name, p in m.named_parameters():
        if name.endswith(("norm1.weight", "norm2.weight")) or name == "norm.weight":
            w[name] = 1.0 + 0.2 * torch.randn_like(p)
        else:
            w[name] = 0.3 * torch.randn_like(p)
    return w


def write(dump_dir, out):
    sd = {k: v.to(torch.bfloat16).contiguous()
          for k, v in seeded_weights(model_of(dump_dir)).items()}
    save_file(sd, out)
    print("wrote %s: %d tensors in BF16 (timm names)" % (out, len(sd)))


def check(dump_dir, weights):
    m = model_of(dump_dir).double()
    m.load_state_dict({k: v.to(torch.float64) for k, v in load_file(weights).items()},
                      strict=True)
    batch = load_file(os.path.join(dump_dir, "batch.safetensors"))
    bf = load_file(os.path.join(dump_dir, "outputs.safetensors"))["logits"].to(torch.float64)
    pixels = batch["ids"].to(torch.float64)
    with torch.no_grad():
        ref = m(pixels)
        # the same model from its F32 weights (before the BF16 rounding): how
        # far one rounding moves the logits
        f32 = model_of(dump_dir)
        f32.load_state_dict(seeded_weights(f32), strict=True)
        unrounded = f32.double()(pixels)
    if bf.shape != ref.shape:
        print("FAIL logits: bf %s, torch %s" % (list(bf.shape), list(ref.shape)))
        return 1
    scale = ref.abs().max().item()
    worst = (bf - ref).abs().max().item()
    rounding = (unrounded - ref).abs().max().item()
    tol = 1e-4 * scale
    print("logits [%d, %d]: max |bf - torch| %.3g, tolerance %.3g; one BF16 rounding of the "
          "weights moves them %.3g (max |logit| %.3g)" % (ref.shape[0], ref.shape[1], worst, tol,
                                                          rounding, scale))
    if not rounding > 10 * tol:
        print("FAIL the check cannot tell the BF16 weights from F32 ones (%.3g)" % rounding)
        return 1
    if not worst <= tol:
        i = (bf - ref).abs().argmax().item()
        r, c = divmod(i, ref.shape[1])
        print("FAIL logits[%d, %d]: bf %.9g, torch %.9g" % (r, c, bf[r, c].item(),
                                                            ref[r, c].item()))
        return 1
    print("ok timm vit: bf's logits match PyTorch's from the same BF16 state_dict")
    return 0


def main(argv):
    if len(argv) != 4 or argv[1] not in ("write", "check"):
        print(__doc__, file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    if argv[1] == "write":
        write(argv[2], argv[3])
        return 0
    return check(argv[2], argv[3])


if __name__ == "__main__":
    sys.exit(main(sys.argv))

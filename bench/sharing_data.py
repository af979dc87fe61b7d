"""A BERT-base-shaped model of random weights for bench/sharing.sh: transformers' BertConfig
defaults (12 layers, hidden 768, 12 heads, intermediate 3072, 30,522-token vocabulary: 110M
parameters, 440 MB of float32), seeded, with all-MiniLM-L6-v2's tokenizer (the same
vocabulary) and a sentence-transformers mean Pooling module.

    python bench/sharing_data.py <out dir> <all-MiniLM-L6-v2 dir>
"""
import json
import shutil
import sys
from pathlib import Path

import torch
from transformers import BertConfig, BertModel

out, tokenizer_from = Path(sys.argv[1]), Path(sys.argv[2])
if (out / "done").exists():
    sys.exit(0)
out.mkdir(parents=True, exist_ok=True)
torch.manual_seed(20)
BertModel(BertConfig(), add_pooling_layer=False).save_pretrained(out, safe_serialization=True)
for name in ["tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"]:
    if (tokenizer_from / name).exists():
        shutil.copy(tokenizer_from / name, out / name)
(out / "1_Pooling").mkdir(exist_ok=True)
(out / "1_Pooling" / "config.json").write_text(
    json.dumps({"word_embedding_dimension": 768, "pooling_mode_mean_tokens": True})
)
(out / "modules.json").write_text(
    json.dumps(
        [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        ]
    )
)
(out / "done").write_text("")

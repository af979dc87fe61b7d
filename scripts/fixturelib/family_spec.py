"""scripts/gen_family_fixtures.py's inputs: the generators it reuses (gen_decoder_fixtures, and through it
gen_backbone_fixtures and gen_fixtures), the texts, pairs and prompts, the fixtures with their seeds,
the config changes recorded as pins and the notes of golden.json.
"""

from __future__ import annotations

from fixturelib.common import load


gd = load("gen_decoder_fixtures")   # loads gen_backbone_fixtures, which loads gen_fixtures
gb = gd.gb
gf = gb.gf

INIT_STD = gf.INIT_STD            # Linear / Embedding ~ N(0, 0.5)
NORM_STD = gf.LAYERNORM_STD       # LayerNorm / RMSNorm weight ~ 1 + N(0, 0.2), bias ~ N(0, 0.2)
BATCH_TOLERANCE = 1e-4            # batched vs one-by-one, max abs
MAX_LENGTH = 32                   # tokenizer model_max_length = sentence-transformers' max_seq_length
# Embedders with long prompts (26 to 50 tokens here) get room for the text after the prompt.
PROMPTED_MAX_LENGTH = 64

# gen_decoder_fixtures' texts ("" and a long one among them), then more: whitespace only, CJK,
# emoji, control characters, accents, mixed case, and inputs longer than MAX_LENGTH tokens.
LONG_INPUT = ("Postgres stores the vectors and the extension computes them inside the database, one batch "
              "after another, while the small model reads every token of this long input twice. Then the "
              "quick brown fox jumps over the lazy dog near the river bank, and the text goes on and on.")
TEXTS = gd.TEXTS + [
    "   ",
    "\u65e5\u672c\u8a9e\u306e\u6587\u7ae0\u3067\u3059\u3002\u4f60\u597d",
    "I love pizza \U0001F355 and tacos \U0001F32E!",
    "x",
    "Tabs\tand\nnewlines  between   words",
    "UPPER CASE WORDS and lower case words",
    "It's 3:45 p.m. -- the meeting's over; let's go.",
    "\u00bfD\u00f3nde est\u00e1 la biblioteca?",
    "Stra\u00dfe, \u00c9cole, \u00c5ngstr\u00f6m",
    "  leading and trailing spaces  ",
    "one-two-three four_five six.seven",
    LONG_INPUT,
    "The cat sat on the mat.",
]
# With a prompt: gen_decoder_fixtures' 9 texts ("" and its long one included).
PROMPT_TEXTS = gd.TEXTS
PAIRS = gd.XLNET_PAIRS + [("A short question?", LONG_INPUT)]
RERANK_QUERY, RERANK_DOCS = gd.RERANK_QUERY, gd.RERANK_DOCS

# Published prompts, as the families' embedders ship them in config_sentence_transformers.json.
JINA_PROMPTS = {
    "retrieval.query": "Represent the query for retrieving evidence documents: ",
    "retrieval.passage": "Represent the document for retrieval: ",
    "separation": "",
    "classification": "",
    "text-matching": "",
}
E5_MISTRAL_PROMPTS = {
    "web_search_query": "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery: ",
    "sts_query": "Instruct: Retrieve semantically similar text.\nQuery: ",
}
BGE_GEMMA2_PROMPTS = {
    "web_search_query": ("<instruct>Given a web search query, retrieve relevant passages that answer the "
                         "query.\n<query>"),
}

LABELS3 = {0: "negative", 1: "neutral", 2: "positive"}
NLI3 = {0: "entailment", 1: "neutral", 2: "contradiction"}

LLAMA_SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]
EUROBERT_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|mask|>"]
CAMEMBERT_SPECIALS = ["<s>NOTUSED", "<pad>", "</s>NOTUSED", "<unk>", "<unk>NOTUSED", "<s>", "</s>"]

# name, kind, seed, source: a derived fixture is another layout of `source`'s weights.
FIXTURES = [
    ("gte_embed", "embed", 71, None),
    ("gte_new", "embed", 71, "gte_embed"),
    ("gte_classify", "classify", 72, None),
    ("jina_v3_embed", "embed", 73, None),
    ("jina_v3_hub", "embed", 73, "jina_v3_embed"),
    ("jina_v3_classify", "classify", 74, None),
    ("mistral_embed", "embed", 75, None),
    ("mistral_classify", "classify", 76, None),
    ("llama_embed", "embed", 77, None),
    ("llama_classify", "classify", 78, None),
    ("gemma2_embed", "embed", 79, None),
    ("gemma2_classify", "classify", 80, None),
    ("camembert_embed", "embed", 81, None),
    ("camembert_classify", "classify", 82, None),
    ("eurobert_embed", "embed", 83, None),
    ("eurobert_classify_late", "classify", 84, None),
    ("eurobert_classify_bos", "classify", 85, None),
    ("eurobert_classify_mean", "classify", 86, None),
]
KINDS = {name: kind for name, kind, _, _ in FIXTURES}

# Per embedding fixture: the prompt names with cases (None: every text without a prompt).
PROMPT_CASES = {
    "jina_v3_embed": ["retrieval.query", "retrieval.passage", "text-matching"],
    "jina_v3_hub": ["retrieval.query", "retrieval.passage", "text-matching"],
    "mistral_embed": ["web_search_query", "sts_query"],
    "gemma2_embed": ["web_search_query"],
}

# Config changes whose effect on the longest input is recorded (`pins`): each must move the
# outputs, so the fixture pins the setting down.
PINS = {
    "gte_embed": {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
    "gte_classify": {"rope_parameters": {"rope_type": "default", "rope_theta": 160000.0}},
    "jina_v3_embed": {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
    "mistral_embed": {"sliding_window": None},
    "mistral_classify": {"sliding_window": None},
    "llama_embed": {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
    "gemma2_embed": {"attn_logit_softcapping": None, "sliding_window": 128, "query_pre_attn_scalar": 16},
    "gemma2_classify": {"attn_logit_softcapping": None, "sliding_window": 128},
    "eurobert_embed": {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
}
# Config changes that must NOT move the outputs (recorded with PINS' as 0.0).
NO_EFFECT = {
    "gemma2_classify": {"final_logit_softcapping": None},
}

NOTES = {
    "gte_embed": "GteModel saved with save_original_format=False: transformers' own module names (layers.N.self_attn."
                 "q_proj/k_proj/v_proj/o_proj with biases, layers.N.mlp.gate_proj/up_proj (no bias)/down_proj (bias), "
                 "layers.N.post_attention_layernorm / post_mlp_layernorm, embeddings.word_embeddings / "
                 "token_type_embeddings / LayerNorm, no position embeddings). Post-LayerNorm layers; RoPE with "
                 "GteConfig's default theta 160000 (rope_parameters in config.json); MLP act(gate) * up. Pooling cls "
                 "(as gte-multilingual-base), Normalize. XLM-R ids, right padding.",
    "gte_new": "gte_embed's weights in the layout of the GTE checkpoints on the Hub: config model_type 'new' / "
               "NewModel with rope_theta, rope_scaling null, position_embedding_type rope, pack_qkv, layer_norm_type, "
               "unpad_inputs, use_memory_efficient_attention, logn_attention_scale; keys encoder.layer.N.attention."
               "qkv_proj (q, k, v on dim 0), attention.o_proj, attn_ln, mlp.up_gate_proj (up, then gate, on dim 0), "
               "mlp.down_proj, mlp_ln (what transformers 5.24's save_pretrained itself writes for a gte model). "
               "transformers 5.24 cannot load model_type 'new' (see transformers_load), so the golden values are "
               "gte_embed's: the same weights.",
    "gte_classify": "GteForSequenceClassification (the BERT head: gte.pooler.dense + tanh on the first token, then "
                    "classifier), num_labels 1 (a CrossEncoder reranker, as gte-multilingual-reranker-base), saved as "
                    "transformers 5.24 saves it: hub names under gte. (gte.encoder.layer.N.attention.qkv_proj, "
                    "mlp.up_gate_proj, attn_ln, mlp_ln). type_vocab_size 0 (gte-base-en-v1.5's setting: no token "
                    "type embedding at all), rope theta 10000 set in config.json.",
    "jina_v3_embed": "JinaEmbeddingsV3Model saved with save_original_format=False: embeddings.word_embeddings + "
                     "token_type_embeddings + LayerNorm, no position embeddings, post-LN layers (layers.N.self_attn."
                     "q/k/v/o_proj with biases, post_attention_layernorm, mlp.fc1 -> gelu -> mlp.fc2, "
                     "post_mlp_layernorm), RoPE with the default theta 20000, pooler.dense (unused). Pooling mean, "
                     "Normalize; jina-embeddings-v3's task prompts (three of them empty).",
    "jina_v3_hub": "jina_v3_embed's weights as transformers 5.24's save_pretrained writes them, i.e. under the names "
                   "its conversion mapping reads: emb_ln, encoder.layers.N.mixer.Wqkv (q, k, v on dim 0), "
                   "mixer.out_proj, norm1, mlp.fc1, mlp.fc2, norm2; model_type jina_embeddings_v3. transformers "
                   "loads it: the golden values are its own (equal to jina_v3_embed's, see matches_source).",
    "jina_v3_classify": "JinaEmbeddingsV3ForSequenceClassification: the XLM-R head (classifier.dense, tanh, "
                        "classifier.out_proj on the first token), 3 labels, hidden_act gelu_new, rope theta 50000 "
                        "set in config.json; saved as transformers saves it (roberta.emb_ln, roberta.encoder.layers."
                        "N.mixer.Wqkv, ...).",
    "mistral_embed": "MistralModel: GQA 4 query / 2 kv heads, head_dim 16 != 32 / 4, sliding_window 8 (a token sees "
                     "itself and the 7 before it: kv > q - 8), causal. e5-mistral's layout: bos <s> and eos </s> "
                     "around every input, Pooling lasttoken (the </s>), Normalize, left padding (position_ids "
                     "= arange(padded length), not shifted), prompts web_search_query / sts_query.",
    "mistral_classify": "MistralForSequenceClassification, 3 labels, score = Linear(32, 3, no bias) read at the "
                        "rightmost token whose id != pad_token_id (2 = </s>); the tokenizer adds only <s> (as "
                        "transformers 5 tokenizes Mistral), so 'hello world</s>' is read at 'world'. Right padding, "
                        "sliding_window 8.",
    "llama_embed": "LlamaModel with attention_bias and mlp_bias true, GQA 4 / 2, head_dim 16 != 32 / 4, rope theta "
                   "500000, causal. The tokenizer adds <s> only; Pooling mean over every token (<s> included), "
                   "Normalize, right padding.",
    "llama_classify": "LlamaForSequenceClassification, 3 labels, a dedicated pad token (<pad> = 3): the logits are "
                      "read at the rightmost token that is not <pad>, so 'hello world<pad>' is read at 'world'. "
                      "Left padding. attention_bias and mlp_bias true.",
    "gemma2_embed": "Gemma2Model: embeddings x sqrt(32), RMSNorm scaling by (1 + weight), 4 norms per layer, "
                    "query_pre_attn_scalar 12 (scale 12 ** -0.5), attn_logit_softcapping 5 (tanh(s / 5) * 5 on the "
                    "scores), layers sliding / full / sliding / full with sliding_window 8 (kv > q - 8), causal, "
                    "no q/k norms. <bos> ... <eos>, left padding, Pooling lasttoken, Normalize, a "
                    "bge-multilingual-gemma2-style prompt.",
    "gemma2_classify": "Gemma2ForSequenceClassification, num_labels 1, score at the rightmost token whose id != "
                       "pad_token_id (0, <pad>): the appended <eos>. final_logit_softcapping 30 in config.json does "
                       "not apply to the sequence-classification logits. Right padding.",
    "camembert_embed": "CamembertModel (RoBERTa layers, positions from padding_idx + 1 = 2), CamemBERT's special ids: "
                       "<s>NOTUSED 0, <pad> 1, </s>NOTUSED 2, <unk> 3, <unk>NOTUSED 4, <s> 5, </s> 6, <mask> last; "
                       "no normalizer (CamembertTokenizer's pre-tokenizer: WhitespaceSplit + Metaspace). "
                       "Pooling mean without Normalize (sentence-camembert's layout).",
    "camembert_classify": "CamembertForSequenceClassification: the RoBERTa head (classifier.dense, tanh, "
                          "classifier.out_proj on <s>), 3 labels; pairs <s> A </s></s> B </s>.",
    "eurobert_embed": "EuroBertModel: Llama layers without the causal mask (bidirectional), GQA 4 / 2, final RMSNorm "
                      "(norm), rope theta 250000. <|begin_of_text|> ... <|end_of_text|>, pad = <|end_of_text|>, "
                      "right padding, Pooling mean, Normalize.",
    "eurobert_classify_late": "EuroBertForSequenceClassification, classifier_pooling late (the default): dense -> "
                              "GELU -> classifier at every token, then the mean of those logits over the "
                              "non-padding tokens. 3 labels.",
    "eurobert_classify_bos": "EuroBertForSequenceClassification, classifier_pooling bos: dense -> GELU -> "
                             "classifier on the first token. 3 labels.",
    "eurobert_classify_mean": "EuroBertForSequenceClassification, classifier_pooling mean: the mean of the "
                              "non-padding hidden states -> dense -> GELU -> classifier; num_labels 1.",
}

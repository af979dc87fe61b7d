"""scripts/gen_fixtures.py's inputs: the tokenizer corpus and vocabulary sizes, the backbone's shape and
init, the test cases and the fixtures (pooling, prompts, heads) it builds. Changing any of it
changes the fixtures.
"""

from __future__ import annotations



# --------------------------------------------------------------------------
# Tokenizer corpus.  Plain English, hard-coded.  Changing it changes every fixture.
# --------------------------------------------------------------------------

CORPUS = """\
The quick brown fox jumps over the lazy dog near the river bank.
A small model can still produce useful sentence embeddings for testing.
Postgres stores the vectors, and the extension computes them inside the database.
Hello world! How are you today? I am fine, thank you very much.
The weather is nice and the sun is shining over the quiet village.
Tokenizers split text into words, and then into smaller word pieces.
Numbers like 1, 2, 3, 10, 42 and 2024 appear in many documents.
She reads a book in the library every Sunday morning before lunch.
Machine learning models learn patterns from large amounts of data.
Search engines rank each document by its similarity to the query.
The passage describes how a query is matched against stored passages.
A query asks a question; a passage answers it with some useful text.
Data, data and more data: the database keeps growing every day.
We tested the new search feature with short and long sentences.
The cat is sleeping on the warm windowsill while it is raining outside.
Please turn off the lights when you leave the room tonight.
Coffee and tea are popular drinks in the morning and in the afternoon.
Students learn to write clear sentences, short paragraphs and long essays.
Every table has rows and columns, and every row has a primary key.
The server answered the request quickly, and the user was happy.
Reading, writing and counting are the first things children learn at school.
Scientists measure the temperature of the ocean at different depths.
The train leaves the station at seven o'clock and arrives at nine.
Good tests compare the output of the new code with trusted reference values.
An index makes searching faster, but it also uses more memory and disk space.
Small changes in the input should give small changes in the output.
The museum opens at ten (except on Mondays) and closes at six.
Write the result to a file, then read it back and check that nothing changed.
My friend's dog doesn't like the rain, but it loves the snow.
Music, art and history are taught together in the new program.
"Hello," she said. "Is anyone there?" Nobody answered her question.
The price went up by 5% last year - from $20 to $21.
Use the command line: run the script, wait, and look at the logs.
Green trees, blue sky, white clouds and a bright yellow sun.
Embedding models turn every sentence into a vector of numbers.
The longest river in the country flows slowly towards the sea.
Running, jumping and swimming are good ways to stay healthy.
They were walking home when they noticed the lights were still on.
This sentence is repeated, repeated, and repeated again for counting.
Nothing is impossible when you work carefully, step by step.
Call 555-0199 between 6 and 8, or write to room 7 on floor 9.
"""

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
N_WHOLE_WORDS = 200  # most frequent corpus words (length >= 2) kept whole
N_PREFIXES = 50      # word-initial pieces (length 2..5) of words not kept whole
N_SUFFIXES = 50      # "##" continuation pieces (length 2..4)

# --------------------------------------------------------------------------
# Backbone.
# --------------------------------------------------------------------------

HIDDEN = 32
MAX_SEQ_LENGTH = 24
INIT_STD = 0.5          # Linear/Embedding weights and biases ~ N(0, INIT_STD)
LAYERNORM_STD = 0.2     # LayerNorm weight ~ 1 + N(0, s), bias ~ N(0, s)
BACKBONE_SEED = 0

# --------------------------------------------------------------------------
# Inputs.  Hard-coded; order is the order in golden.json.
# --------------------------------------------------------------------------

CASES: list[tuple[str, str]] = [
    ("short", "Hello world"),
    ("sentence", "The quick brown fox jumps over the lazy dog."),
    ("question", "How are you today?"),
    ("mixed_case", "PostgreSQL Stores VECTORS in the DataBase"),
    ("subwords", "Unbelievably, tokenizers were retokenizing it."),
    ("digits_punct", "Version 2.0 (2024-05-01), 99% done!"),
    ("accents", "Caf\u00e9 d\u00e9j\u00e0 vu, na\u00efve \u00fcber Stra\u00dfe"),
    ("emoji_unknown", "I love pizza \U0001f355 and coffee \u2615 \u2014 \u00a9 \u2122"),
    ("cjk", "\u65e5\u672c\u8a9e \u4e2d\u6587 mixed with English"),
    ("repeated_word", "data data data data data data"),
    ("repeated_chars", "a" * 12),
    ("empty", ""),
    ("single_char", "a"),
    ("single_punct", "."),
    ("whitespace_only", " \t\n  "),
    ("leading_trailing_ws", "   the sun is shining   "),
    ("control_chars", "tab\there\u0007bell\u200bzero width"),
    # 22 word tokens + [CLS] + [SEP] = exactly MAX_SEQ_LENGTH: fits, no truncation.
    ("at_limit_22_words", " ".join(["data"] * 22)),
    # 23 word tokens + 2 = 25: truncated by exactly one token.
    ("over_limit_23_words", " ".join(["data"] * 23)),
    ("long_truncated",
     "Search engines rank each document by its similarity to the query, and the database keeps "
     "growing every day, so the extension computes embeddings for every new row inside Postgres."),
]
MUST_TRUNCATE = {"over_limit_23_words", "long_truncated"}
MUST_FIT_EXACTLY = {"at_limit_22_words"}

PROMPTS = {"query": "query: ", "passage": "passage: "}
TRUNCATE_DIM = 8

# name -> spec.  Dense entries: (in, out, bias, activation class name in torch.nn, seed).
POOL_ORDER = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
FIXTURES: list[tuple[str, dict]] = [
    ("pool_cls", {"pooling": "cls"}),
    ("pool_mean", {"pooling": "mean", "token_embeddings": True}),
    ("pool_max", {"pooling": "max"}),
    ("pool_mean_sqrt_len_tokens", {"pooling": "mean_sqrt_len_tokens"}),
    ("pool_weightedmean", {"pooling": "weightedmean"}),
    ("pool_lasttoken", {"pooling": "lasttoken"}),
    ("pool_concat", {"pooling": POOL_ORDER, "batched": True}),
    ("dense_tanh", {"pooling": "mean", "dense": [(32, 16, True, "Tanh", 101)], "normalize": True,
                    "truncate_dim": TRUNCATE_DIM}),
    ("dense_chain", {"pooling": "cls", "dense": [(32, 24, False, "Identity", 102), (24, 8, True, "ReLU", 103)]}),
    ("dense_gelu", {"pooling": "mean", "dense": [(32, 16, True, "GELU", 104)]}),
    ("dense_sigmoid", {"pooling": "mean", "dense": [(32, 16, True, "Sigmoid", 105)]}),
    ("dense_leakyrelu", {"pooling": "mean", "dense": [(32, 16, True, "LeakyReLU", 106)]}),
    ("dense_silu", {"pooling": "mean", "dense": [(32, 16, True, "SiLU", 107)]}),
    ("dense_softplus", {"pooling": "mean", "dense": [(32, 16, True, "Softplus", 108)]}),
    ("prompts", {"pooling": "mean", "normalize": True, "prompts": PROMPTS, "include_prompt": True}),
    ("prompts_exclude", {"pooling": "mean", "normalize": True, "prompts": PROMPTS, "include_prompt": False}),
    # Every pooling mode with the prompt excluded (cls then picks the first token after the
    # prompt, weightedmean keeps the original position weights, ...).  Only the "query" prompt
    # is recorded here; "passage" behaves the same way and is covered by the two fixtures above.
    ("prompts_exclude_concat", {"pooling": POOL_ORDER, "prompts": PROMPTS, "include_prompt": False,
                                "prompt_names": ["query"]}),
    # Three modes in a non-legacy order: sentence-transformers 6.x concatenates as listed.
    ("pool_concat3", {"pooling": ("mean", "cls", "max")}),
    # A plain Hugging Face directory (no sentence-transformers files): sentence-transformers
    # wraps it with mean pooling; the backbone's pooler_output is recorded too.
    ("hf_plain", {"plain": True, "pooler_output": True}),
    # Mean pooling with no heads of its own, plus heads.safetensors holding two linear heads
    # that pg_embed applies from options; the golden values come from sentence-transformers
    # with the same weights as Dense modules (tanh with bias, then identity without), then
    # Normalize.
    ("user_head", {"pooling": "mean", "user_heads": [("proj", 32, 20, True, "Tanh", 201),
                                                      ("out", 20, 12, False, "Identity", 202)]}),
    # Dense with use_residual (sentence-transformers 6.x): x + f(Wx + b) when the widths
    # agree, else a bias-free residual projection of x is added.
    ("dense_residual", {"pooling": "mean", "dense": [(32, 32, True, "Tanh", 109, True),
                                                     (32, 16, True, "ReLU", 110, True)]}),
]

OWNED_FILES = {"golden.json"}  # plus every fixture directory; README.md is hand-written

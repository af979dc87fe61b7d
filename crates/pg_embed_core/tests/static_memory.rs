//! A static model's long input in bounded memory: the tokenizer's working memory is bounded
//! by a piece of the text (`text::encode_in_pieces`), and pooling reads the table's rows in
//! place (`Model::token_table`), so a call's peak is the ids and little else, never a
//! [tokens, width] copy of the rows. Measured with a counting allocator (this test binary's
//! own): the peak of the bytes allocated during one call over the bytes allocated before it.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use common::*;
use pg_embed_core::options::Options;
use pg_embed_core::pipeline::Pipeline;

struct Counting;

static NOW: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = NOW.fetch_add(layout.size(), Relaxed) + layout.size();
        PEAK.fetch_max(now, Relaxed);
        // SAFETY: the caller's layout, as GlobalAlloc::alloc requires.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        NOW.fetch_sub(layout.size(), Relaxed);
        // SAFETY: ptr was allocated by `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            let now = NOW.fetch_add(new_size - layout.size(), Relaxed) + new_size - layout.size();
            PEAK.fetch_max(now, Relaxed);
        } else {
            NOW.fetch_sub(layout.size() - new_size, Relaxed);
        }
        // SAFETY: as GlobalAlloc::realloc requires, from the caller.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The peak growth of allocated bytes while `f` runs.
fn peak_growth<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let before = NOW.load(Relaxed);
    PEAK.store(before, Relaxed);
    let out = f();
    (out, PEAK.load(Relaxed) - before)
}

#[test]
fn a_long_input_to_a_static_model_takes_memory_for_its_ids_not_for_its_rows() {
    let p = Pipeline::load(&root().join("tests/fixtures/sparse/static_st"), &Options::default()).unwrap();
    let width = p.info().dim;
    let sentence = "the quick brown fox jumps over the lazy dog near a river bank ";
    let text = sentence.repeat((4 << 20) / sentence.len());
    let tokens = p.tokenize(&text).unwrap().len();
    let (v, peak) = peak_growth(|| p.embed(&[text.as_str()]).unwrap());
    assert_eq!(v[0].len(), width);
    // The vector of the sentence alone (the mean of a repeated sentence's rows, up to the
    // rounding of a float32 sum over a million rows), so the call computed what it should.
    let one = p.embed(&[sentence]).unwrap();
    assert!(cosine(&v[0], &one[0]) > 0.9999, "{:?} vs {:?}", &v[0][..4], &one[0][..4]);
    let rows = tokens * width * 4;
    eprintln!(
        "static model, {} bytes of text, {tokens} tokens, width {width}: peak growth {peak} bytes ({:.2} per byte of text, {:.2} per token); the rows gathered would be {rows} bytes",
        text.len(),
        peak as f64 / text.len() as f64,
        peak as f64 / tokens as f64
    );
    // The ids (4 bytes a token, twice while the vector grows, plus the type ids the tokenizer
    // returns) and a piece's tokenizer memory: well under the rows a gather would copy.
    assert!(peak < rows / 2, "peak growth {peak} bytes, the rows alone are {rows}");
    assert!(peak < 24 * tokens + (16 << 20), "peak growth {peak} bytes for {tokens} tokens");
}

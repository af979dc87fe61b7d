//! Scratch buffers and row-parallel helpers shared by the stack, attention and the linear
//! layers: the activations a thread keeps between forward passes, [`Buf`] (a buffer that
//! may cross to the pool's threads), [`Share`] (how one step's work is shared out) and the
//! row splits over them.

use rayon::prelude::*;

thread_local! {
    /// The intermediate activations of the last forward pass on this thread, kept for the
    /// next one when they are small (single inputs): no allocation, page faults or zeroing
    /// per call, and a resident size that does not move.
    pub(super) static ACTIVATIONS: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// The most floats of intermediate activations a thread keeps between calls: 4 MB, a
/// 256-token input of a 384-wide model. Batches allocate theirs, keep them for the call's
/// next batch (`crate::threads::keeping_buffers`) and give them back at its end
/// ([`release_activations`]).
pub(super) const KEEP_ACTIVATIONS: usize = 1 << 20;

/// Gives back this thread's activations if they are larger than a call keeps.
pub fn release_activations() {
    let scratch = ACTIVATIONS.take();
    if scratch.capacity() <= KEEP_ACTIVATIONS {
        ACTIVATIONS.set(scratch);
    }
}

/// `n` zeros. A large buffer is mapped fresh (the allocator's threshold is fixed, see
/// `crate::threads`), not written here, and backed by huge pages (measured: page faults
/// were ~5% of a batch's time with 4 kB pages).
pub(super) fn zeroed(n: usize) -> Vec<f32> {
    let v = vec![0f32; n];
    crate::threads::huge_pages(&v);
    v
}

/// A buffer that may cross to the pool's threads; who writes which part of it, and when,
/// is the business of the code that shares it.
#[derive(Clone, Copy)]
pub(crate) struct Buf {
    pub ptr: *mut f32,
    pub len: usize,
}
unsafe impl Send for Buf {}
unsafe impl Sync for Buf {}

impl Buf {
    #[inline]
    pub fn of(v: &mut [f32]) -> Self {
        Buf { ptr: v.as_mut_ptr(), len: v.len() }
    }

    /// The address of element `i` (a method, so that closures capture the whole `Buf`,
    /// which may cross threads, not its pointer).
    ///
    /// # Safety
    /// `i` is within the buffer.
    #[inline]
    pub unsafe fn at(self, i: usize) -> *mut f32 {
        unsafe { self.ptr.add(i) }
    }

    /// # Safety
    /// No thread writes the buffer while the slice lives.
    #[inline]
    pub unsafe fn get<'a>(self) -> &'a [f32] {
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// How the work of one step is shared: alone (`member` None), this thread does all of it
/// with `threads` rayon threads; in a team, the step is cut into chunks that the team's
/// threads claim.
#[derive(Clone, Copy)]
pub(crate) struct Share<'a> {
    pub member: Option<&'a crate::threads::Member<'a>>,
    pub threads: usize,
}

impl Share<'_> {
    /// `f` over ranges that together cover 0..n: all of it when alone; in a team, one
    /// team step whose chunks are the ranges.
    #[inline]
    pub fn split(&self, n: usize, f: impl Fn(std::ops::Range<usize>)) {
        match self.member {
            None => f(0..n),
            Some(m) => {
                let chunks = m.count().min(n).max(1);
                m.step(chunks, |c| f(n * c / chunks..n * (c + 1) / chunks))
            }
        }
    }
}

/// `f(first row, rows)` over the rows of `buf`, shared as `share` says.
///
/// # Safety
/// No thread but those of `share` reads or writes the buffer meanwhile.
pub(super) unsafe fn rows_shared(buf: Buf, width: usize, share: Share, f: &(dyn Fn(usize, &mut [f32]) + Sync)) {
    let rows = buf.len / width.max(1);
    share.split(rows, |part| {
        // SAFETY: the rows are within the buffer, and each range is this call's alone.
        let mine =
            unsafe { std::slice::from_raw_parts_mut(buf.ptr.add(part.start * width), part.len() * width) };
        if share.member.is_some() {
            f(part.start, mine)
        } else {
            for_rows(mine, width, share.threads, &|first, rows| f(part.start + first, rows))
        }
    })
}

/// `f(first row, rows)` over whole rows of `x`, split across `threads` when there are
/// several.
#[inline]
pub(crate) fn for_rows(x: &mut [f32], width: usize, threads: usize, f: &(dyn Fn(usize, &mut [f32]) + Sync)) {
    let rows = x.len() / width.max(1);
    if threads > 1 && rows >= 2 * threads {
        let per = rows.div_ceil(threads);
        x.par_chunks_mut(per * width).enumerate().for_each(|(i, c)| f(i * per, c));
    } else {
        f(0, x);
    }
}

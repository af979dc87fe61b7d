//! [`Shared`]: the buffer every weight of a loaded model lives in. It is either this
//! process's own memory (a model built from its safetensors files) or a slice of a prepared
//! file mapped read-only and shared by every backend (see [`crate::prepared::file`]). The
//! kernels read it as a plain slice and never know which.
//!
//! While a model is built into a prepared file (a [`Sink`] is active on the building thread,
//! see `crate::prepared::arena`), every buffer of at least [`SPILL`] bytes is placed in the
//! file as soon as it is made, and the `Shared` is a slice of the file's mapping: the
//! building process holds one tensor's working memory, not a private copy of the model.
//!
//! Serializing a `Shared` (into a prepared file, with a sink active) emits only
//! `[offset, length]` of its place in the file's data section, placing it there first if
//! it is not yet; deserializing one (inside [`crate::prepared::file::Mapped::restore`])
//! turns `[offset, length]` back into a slice of the mapping, checked against its bounds
//! and alignment. Outside those calls both are an error.

use std::cell::RefCell;
use std::ops::Deref;
use std::sync::Arc;

use serde::de::Error as _;
use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Plain element types a buffer may hold: any bit pattern is a valid value, no padding, no
/// pointers.
///
/// # Safety
/// Implement only for `Copy` types without padding or invalid bit patterns.
pub unsafe trait Element: Copy + Send + Sync + 'static {}

// SAFETY: every bit pattern is an f32; no padding.
unsafe impl Element for f32 {}

// SAFETY: every bit pattern is an i32; no padding.
unsafe impl Element for i32 {}

/// Where the data section of a file being written or mapped starts, and the alignment of
/// every buffer in it (a cache line: the kernels' 512-bit loads).
pub const ALIGN: usize = 64;

/// A read-only buffer of `T`: owned, or a slice of a shared mapping.
pub struct Shared<T: Element> {
    repr: Repr<T>,
}

enum Repr<T: Element> {
    Owned(Vec<T>),
    Mapped {
        /// Keeps the mapping (and its file lock) alive while the slice is in use.
        _map: Arc<dyn Region>,
        ptr: *const T,
        len: usize,
    },
}

/// Memory that outlives every buffer made from it.
pub trait Region: Send + Sync {
    fn bytes(&self) -> &[u8];
}

// SAFETY: a mapped buffer is an immutable slice of a region kept alive by the Arc; the
// region is never written while mapped.
unsafe impl<T: Element> Send for Shared<T> {}
// SAFETY: as above, only shared reads.
unsafe impl<T: Element> Sync for Shared<T> {}

impl<T: Element> Shared<T> {
    /// Whether the data lives in a shared mapping.
    pub fn is_mapped(&self) -> bool {
        matches!(self.repr, Repr::Mapped { .. })
    }

    /// The buffer's own memory as bytes.
    fn as_bytes(&self) -> &[u8] {
        let values: &[T] = self;
        // SAFETY: T is plain data (Element); the byte view covers exactly the values.
        unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values)) }
    }
}

impl<T: Element> Deref for Shared<T> {
    type Target = [T];

    #[inline]
    fn deref(&self) -> &[T] {
        match &self.repr {
            Repr::Owned(v) => v,
            // SAFETY: checked in bounds and aligned when made; the region outlives self.
            Repr::Mapped { ptr, len, .. } => unsafe { std::slice::from_raw_parts(*ptr, *len) },
        }
    }
}

impl<T: Element> From<Vec<T>> for Shared<T> {
    /// The vector itself; with a sink active and at least [`SPILL`] bytes, a copy in the
    /// file being written (the vector is freed).
    fn from(v: Vec<T>) -> Self {
        let bytes = std::mem::size_of_val(&v[..]);
        if bytes >= SPILL {
            // SAFETY: T is plain data; the byte view covers exactly the values.
            let src = unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), bytes) };
            if let Some(sink) = SINK.with_borrow(|s| s.clone()) {
                if let Some((region, ptr, _)) = sink.put(src) {
                    return Shared { repr: Repr::Mapped { _map: region, ptr: ptr.cast::<T>(), len: v.len() } };
                }
            }
        }
        Shared { repr: Repr::Owned(v) }
    }
}

impl<T: Element> Shared<T> {
    /// A buffer of `len` values written in place by `fill`, which is given them as zero
    /// bits (a valid value of every `Element`): in the file being written when a sink is
    /// active and it is large enough, with no private copy first.
    pub fn filled(len: usize, fill: impl FnOnce(&mut [T])) -> Self {
        let bytes = len.saturating_mul(std::mem::size_of::<T>());
        let mut fill = Some(fill);
        if bytes >= SPILL {
            let placed = place(bytes, |dst| {
                // SAFETY: `dst` is `bytes` zeroed, writable bytes at a 64-byte boundary (the
                // sink's rule): exactly `len` values of T (plain data, any bit pattern
                // valid, align <= 64).
                let values = unsafe { std::slice::from_raw_parts_mut(dst.as_mut_ptr().cast::<T>(), len) };
                if let Some(f) = fill.take() {
                    f(values);
                }
            });
            if let Some(placed) = placed {
                return placed;
            }
        }
        // SAFETY: zero bits are a valid T (Element: any bit pattern is).
        let mut v = vec![unsafe { std::mem::zeroed::<T>() }; len];
        if let Some(f) = fill.take() {
            f(&mut v);
        }
        Shared { repr: Repr::Owned(v) }
    }
}

impl<T: Element> Default for Shared<T> {
    fn default() -> Self {
        Vec::new().into()
    }
}

impl<T: Element + std::fmt::Debug> std::fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Shared<{}>[{}{}]", std::any::type_name::<T>(), self.len(), if self.is_mapped() { ", mapped" } else { "" })
    }
}

/// Float buffers, the common case.
pub type Floats = Shared<f32>;

/// Buffers of at least this many bytes are placed in the file being written as soon as
/// they are made (smaller ones when the model is serialized).
pub const SPILL: usize = 1 << 16;

/// A prepared file being written that buffers are placed in (`crate::prepared::arena`).
pub(crate) trait Sink {
    /// Room for `bytes` bytes at a 64-byte boundary of the data section, written by `fill`:
    /// the region that keeps it alive, the place's address and its offset in the data
    /// section. `None` when there is no room (the file cannot grow): the caller keeps its
    /// own copy.
    fn place(&self, bytes: usize, fill: &mut dyn FnMut(&mut [u8])) -> Option<(Arc<dyn Region>, *const u8, usize)>;
    /// As `place`, a copy of `src` (written to the file, not through the mapping).
    fn put(&self, src: &[u8]) -> Option<(Arc<dyn Region>, *const u8, usize)>;
    /// The offset in the data section of the buffer at `ptr`, when it lies in this file.
    fn offset_of(&self, ptr: *const u8, bytes: usize) -> Option<usize>;
}

/// Makes `bytes` bytes in the active sink, written by `fill`; `None` without a sink.
fn place<T: Element>(bytes: usize, mut fill: impl FnMut(&mut [u8])) -> Option<Shared<T>> {
    let sink = SINK.with_borrow(|s| s.clone())?;
    let (region, ptr, _) = sink.place(bytes, &mut fill)?;
    let len = bytes / std::mem::size_of::<T>().max(1);
    Some(Shared { repr: Repr::Mapped { _map: region, ptr: ptr.cast::<T>(), len } })
}

/// Runs `f` with `sink` active on this thread: large buffers made meanwhile are placed in
/// it, and serializing a buffer places it (if it is not there yet) and emits its offset.
pub(crate) fn sinking<R>(sink: Arc<dyn Sink>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Arc<dyn Sink>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            SINK.with_borrow_mut(|s| *s = previous);
        }
    }
    let _restore = Restore(SINK.replace(Some(sink)));
    f()
}


/// The mapping buffers are restored from.
pub(crate) struct Source {
    pub region: Arc<dyn Region>,
    /// Where the data section starts in `region`'s bytes, and its length.
    pub start: usize,
    pub len: usize,
    /// Bytes of buffers restored so far.
    pub restored: usize,
}

thread_local! {
    static SINK: RefCell<Option<Arc<dyn Sink>>> = const { RefCell::new(None) };
    static SOURCE: RefCell<Option<Source>> = const { RefCell::new(None) };
}

/// Runs `f` with buffers deserialized from `source`; returns `f`'s result and the bytes of
/// buffers it restored.
pub(crate) fn restoring<R>(source: Source, f: impl FnOnce() -> R) -> (R, usize) {
    let previous = SOURCE.replace(Some(source));
    let out = f();
    let restored = SOURCE.replace(previous).map_or(0, |s| s.restored);
    (out, restored)
}

impl<T: Element> Serialize for Shared<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let bytes = self.as_bytes();
        let sink = SINK.with_borrow(|s| s.clone());
        let sink = sink.ok_or_else(|| S::Error::custom("a weight buffer is serialized only into a prepared file"))?;
        let offset = match sink.offset_of(bytes.as_ptr(), bytes.len()) {
            Some(offset) => offset,
            None => sink
                .put(bytes)
                .map(|(_, _, offset)| offset)
                .ok_or_else(|| S::Error::custom("the prepared file cannot grow (see the server log)"))?,
        };
        [offset, self.len()].serialize(serializer)
    }
}

impl<'de, T: Element> Deserialize<'de> for Shared<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let [offset, len] = <[usize; 2]>::deserialize(deserializer)?;
        SOURCE.with_borrow_mut(|s| {
            let s = s.as_mut().ok_or_else(|| D::Error::custom("a weight buffer is restored only from a prepared file"))?;
            let bytes = len
                .checked_mul(std::mem::size_of::<T>())
                .filter(|b| offset.checked_add(*b).is_some_and(|end| end <= s.len))
                .ok_or_else(|| D::Error::custom(format!("buffer [{offset}, {len}] lies outside the data section of {} bytes", s.len)))?;
            if offset % ALIGN != 0 {
                return Err(D::Error::custom(format!("buffer at {offset} is not {ALIGN}-byte aligned")));
            }
            let all = s.region.bytes();
            let ptr = all[s.start + offset..].as_ptr();
            if ptr.align_offset(std::mem::align_of::<T>()) != 0 {
                return Err(D::Error::custom(format!("buffer at {offset} is not aligned for its type")));
            }
            s.restored += bytes;
            Ok(Shared { repr: Repr::Mapped { _map: s.region.clone(), ptr: ptr.cast::<T>(), len } })
        })
    }
}

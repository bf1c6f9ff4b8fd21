//! Strings as 16-byte views.
//!
//! ```text
//!  StrView, 16 bytes
//!  ┌──────────┬──────────────────────────────────────────────┐
//!  │ len: u32 │ len <= 12: the bytes, inline, zero padded     │
//!  │          ├───────────────┬──────────────┬───────────────┤
//!  │          │ prefix: 4 B   │ heap: u32    │ offset: u32   │   len > 12
//!  └──────────┴───────────────┴──────────────┴───────────────┘
//! ```
//!
//! A string column is a buffer of views plus the list of heaps (byte buffers) that long
//! strings point into. Gathering, filtering and hash-table materialisation copy 16-byte
//! views, never string bytes; comparisons usually decide on the length and the 4-byte
//! prefix without touching the heap. Heaps are immutable and shared by reference count, so
//! a view stays valid as long as any column holding its heap list lives.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

use crate::buffer::Buffer;

/// Strings of at most this many bytes are stored inside the view.
pub const INLINE_LEN: usize = 12;

/// A string heap: the bytes that long views point into.
pub type Heap = Arc<Vec<u8>>;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(C, align(8))]
pub struct StrView {
    len: u32,
    data: [u8; 12],
}

impl StrView {
    /// A view of an inline string (`bytes.len() <= 12`).
    #[inline]
    pub fn inline(bytes: &[u8]) -> StrView {
        debug_assert!(bytes.len() <= INLINE_LEN);
        let mut data = [0u8; 12];
        data[..bytes.len()].copy_from_slice(bytes);
        StrView { len: bytes.len() as u32, data }
    }

    /// A view of a long string at `offset` in heap number `heap`.
    #[inline]
    pub fn long(bytes: &[u8], heap: u32, offset: u32) -> StrView {
        debug_assert!(bytes.len() > INLINE_LEN);
        let mut data = [0u8; 12];
        data[..4].copy_from_slice(&bytes[..4]);
        data[4..8].copy_from_slice(&heap.to_le_bytes());
        data[8..12].copy_from_slice(&offset.to_le_bytes());
        StrView { len: bytes.len() as u32, data }
    }

    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The view's 16 bytes as one integer: two views are equal exactly when these are.
    #[inline(always)]
    pub fn to_bits(self) -> u128 {
        // SAFETY: `StrView` is 16 bytes of plain integers (`repr(C)`, no padding: a u32
        // then 12 bytes), and every bit pattern is a valid u128.
        unsafe { std::mem::transmute::<StrView, u128>(self) }
    }

    /// The view whose 16 bytes are `bits` (the inverse of [`StrView::to_bits`]). A long
    /// view must point into the heaps of the column it is placed in; inline bytes past the
    /// length must be zero.
    #[inline(always)]
    pub fn from_bits(bits: u128) -> StrView {
        // SAFETY: `StrView` is 16 bytes of plain integers (see `to_bits`): every bit
        // pattern is a valid value.
        unsafe { std::mem::transmute::<u128, StrView>(bits) }
    }

    /// An inline string as one integer: the length in the low byte, then the bytes
    /// (zero padded). Equal strings give equal integers; `None` for long strings.
    #[inline(always)]
    pub fn inline_bits(&self) -> Option<u128> {
        if self.len as usize > INLINE_LEN {
            return None;
        }
        let mut bytes = [0u8; 16];
        bytes[..12].copy_from_slice(&self.data);
        Some((self.len as u128 & 0xff) | (u128::from_le_bytes(bytes) << 8))
    }

    #[inline(always)]
    pub fn is_inline(&self) -> bool {
        self.len as usize <= INLINE_LEN
    }

    /// The first (up to) four bytes.
    #[inline(always)]
    pub fn prefix(&self) -> [u8; 4] {
        [self.data[0], self.data[1], self.data[2], self.data[3]]
    }

    #[inline(always)]
    pub fn heap_index(&self) -> u32 {
        u32::from_le_bytes([self.data[4], self.data[5], self.data[6], self.data[7]])
    }

    #[inline(always)]
    pub fn heap_offset(&self) -> u32 {
        u32::from_le_bytes([self.data[8], self.data[9], self.data[10], self.data[11]])
    }

    /// The same string pointing into heap number `heap` instead (used when heap lists merge).
    #[inline]
    pub fn with_heap_index(mut self, heap: u32) -> StrView {
        debug_assert!(!self.is_inline());
        self.data[4..8].copy_from_slice(&heap.to_le_bytes());
        self
    }

    /// The twelve bytes after the length: an inline string's bytes, zero past its length
    /// (for copying a short string with one fixed-size move).
    #[inline(always)]
    pub fn data(&self) -> &[u8; 12] {
        &self.data
    }

    /// The string's bytes, resolving long strings through `heaps`.
    #[inline(always)]
    pub fn bytes<'a>(&'a self, heaps: &'a [Heap]) -> &'a [u8] {
        let len = self.len as usize;
        if len <= INLINE_LEN {
            &self.data[..len]
        } else {
            let start = self.heap_offset() as usize;
            &heaps[self.heap_index() as usize][start..start + len]
        }
    }

    /// The string as `&str`. Views are only ever built from valid UTF-8.
    #[inline(always)]
    pub fn as_str<'a>(&'a self, heaps: &'a [Heap]) -> &'a str {
        let bytes = self.bytes(heaps);
        debug_assert!(std::str::from_utf8(bytes).is_ok());
        // SAFETY: every constructor of string columns (`StrColumnBuilder::push` and the
        // loaders) only stores bytes that came from a `&str`.
        unsafe { std::str::from_utf8_unchecked(bytes) }
    }

    /// Fast equality on views: the first eight bytes (length + prefix) decide most cases.
    #[inline(always)]
    pub fn eq_in(&self, self_heaps: &[Heap], other: &StrView, other_heaps: &[Heap]) -> bool {
        if self.len != other.len || self.prefix() != other.prefix() {
            return false;
        }
        if self.is_inline() {
            return self.data == other.data;
        }
        self.bytes(self_heaps) == other.bytes(other_heaps)
    }
}

impl fmt::Debug for StrView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_inline() {
            write!(f, "{:?}", String::from_utf8_lossy(&self.data[..self.len as usize]))
        } else {
            write!(f, "StrView(len={}, heap={}, offset={})", self.len, self.heap_index(), self.heap_offset())
        }
    }
}

/// A column of strings: views plus the heaps long views point into.
///
/// A column a scan decoded from a dictionary of at most 256 values also carries the
/// values' dictionary codes, and may hold only them until its views are first asked for
/// (`views()` then decodes them): an aggregation that groups by the codes never needs
/// the views of most of its input.
#[derive(Clone, Debug)]
pub struct StrColumn {
    /// Set when the column is built; for a column made from codes, on first use.
    views: OnceLock<Buffer<StrView>>,
    pub heaps: Arc<Vec<Heap>>,
    /// The values' codes in the dictionary they were decoded from: operators may work on
    /// the codes instead of the strings (the hash aggregate groups by them). Slices and
    /// gathers keep them; anything that builds new views leaves them out.
    pub codes: Option<DictionaryCodes>,
}

/// Row `i` of a string vector holds value number `codes[i]` of dictionary `dictionary`.
#[derive(Clone, Debug)]
pub struct DictionaryCodes {
    pub codes: Buffer<u8>,
    /// Which dictionary: vectors with equal ids map codes to values the same way.
    pub dictionary: u64,
    /// The dictionary's values (every code is below their number), as views into the
    /// column's heaps.
    pub values: Buffer<StrView>,
}

impl DictionaryCodes {
    /// A process-wide unique id for a new dictionary.
    pub fn new_dictionary_id() -> u64 {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// The number of values in the dictionary.
    pub fn size(&self) -> usize {
        self.values.len()
    }

    /// The view of each code.
    fn decode(&self) -> Buffer<StrView> {
        let values = self.values.as_slice();
        Buffer::from_vec(self.codes.iter().map(|&c| values.get(c as usize).copied().unwrap_or_default()).collect())
    }
}

impl StrColumn {
    pub fn new(views: Buffer<StrView>, heaps: Arc<Vec<Heap>>) -> Self {
        StrColumn { views: OnceLock::from(views), heaps, codes: None }
    }

    /// A column of the dictionary values `codes` names, its views decoded on first use.
    pub fn from_codes(codes: DictionaryCodes, heaps: Arc<Vec<Heap>>) -> Self {
        StrColumn { views: OnceLock::new(), heaps, codes: Some(codes) }
    }

    pub fn empty() -> Self {
        StrColumn::new(Buffer::empty(), Arc::new(Vec::new()))
    }

    /// The heaps long strings' views point into.
    pub fn heaps(&self) -> &[Heap] {
        &self.heaps
    }

    /// The column with `codes` attached (they must describe these views).
    pub fn with_codes(self, codes: DictionaryCodes) -> Self {
        debug_assert_eq!(codes.codes.len(), self.len());
        StrColumn { codes: Some(codes), ..self }
    }

    /// The views, decoded from the codes if this is their first use.
    #[inline]
    pub fn views(&self) -> &Buffer<StrView> {
        self.views.get_or_init(|| self.codes.as_ref().map_or_else(Buffer::empty, DictionaryCodes::decode))
    }

    /// Whether the views exist (a column made from codes has none until first used).
    pub fn views_decoded(&self) -> bool {
        self.views.get().is_some()
    }

    pub fn len(&self) -> usize {
        match (self.views.get(), &self.codes) {
            (None, Some(codes)) => codes.codes.len(),
            _ => self.views().len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline(always)]
    pub fn get(&self, idx: usize) -> &str {
        self.views()[idx].as_str(&self.heaps)
    }

    #[inline(always)]
    pub fn get_bytes(&self, idx: usize) -> &[u8] {
        self.views()[idx].bytes(&self.heaps)
    }

    pub fn slice(&self, offset: usize, len: usize) -> StrColumn {
        let codes = self.codes.as_ref().map(|c| DictionaryCodes { codes: c.codes.slice(offset, len), ..c.clone() });
        let views = match (self.views.get(), &codes) {
            // Still only codes: so is the slice.
            (None, Some(_)) => OnceLock::new(),
            _ => OnceLock::from(self.views().slice(offset, len)),
        };
        StrColumn { views, heaps: Arc::clone(&self.heaps), codes }
    }

    /// Rows at `indices`, sharing this column's heaps.
    pub fn gather(&self, indices: &[u32]) -> StrColumn {
        let codes = self.codes.as_ref().map(|c| {
            let codes = c.codes.as_slice();
            DictionaryCodes { codes: Buffer::from_vec(indices.iter().map(|&i| codes[i as usize]).collect()), ..c.clone() }
        });
        let views = match (self.views.get(), &codes) {
            (None, Some(_)) => OnceLock::new(),
            _ => {
                let views = self.views().as_slice();
                OnceLock::from(Buffer::from_vec(indices.iter().map(|&i| views[i as usize]).collect()))
            }
        };
        StrColumn { views, heaps: Arc::clone(&self.heaps), codes }
    }

    pub fn from_strs<'a>(values: impl IntoIterator<Item = &'a str>) -> StrColumn {
        let mut builder = StrColumnBuilder::new();
        for value in values {
            builder.push(value);
        }
        builder.finish()
    }

    /// Bytes held by views (or codes not yet decoded) and heaps.
    pub fn allocated_bytes(&self) -> usize {
        let rows = match (self.views.get(), &self.codes) {
            (None, Some(codes)) => codes.codes.allocated_bytes(),
            _ => self.views().allocated_bytes(),
        };
        rows + self.heaps.iter().map(|h| h.capacity()).sum::<usize>()
    }
}

/// Size at which the builder starts a new heap (keeps offsets in `u32` and heaps shareable).
const HEAP_CHUNK: usize = 1 << 20;

/// Builds string columns by appending strings or views of other columns.
#[derive(Default)]
pub struct StrColumnBuilder {
    views: Vec<StrView>,
    /// Heaps already referenced (frozen): other columns' heaps and our full ones.
    heaps: Vec<Heap>,
    /// Position of a foreign heap in `heaps`, by address, so a heap is listed once.
    heap_positions: HashMap<usize, u32>,
    /// The heap we are currently appending long strings to; `heaps.len()` is its index.
    current: Vec<u8>,
}

impl StrColumnBuilder {
    pub fn new() -> Self {
        StrColumnBuilder::default()
    }

    pub fn with_capacity(rows: usize) -> Self {
        StrColumnBuilder { views: Vec::with_capacity(rows), ..Default::default() }
    }

    pub fn len(&self) -> usize {
        self.views.len()
    }

    pub fn is_empty(&self) -> bool {
        self.views.is_empty()
    }

    #[inline]
    pub fn push(&mut self, value: &str) {
        self.push_bytes_unchecked(value.as_bytes());
    }

    /// Appends bytes that are known to be valid UTF-8.
    #[inline]
    pub fn push_bytes_unchecked(&mut self, bytes: &[u8]) {
        if bytes.len() <= INLINE_LEN {
            self.views.push(StrView::inline(bytes));
            return;
        }
        if self.current.len() + bytes.len() > HEAP_CHUNK && !self.current.is_empty() {
            self.freeze_current();
        }
        let offset = self.current.len() as u32;
        self.current.extend_from_slice(bytes);
        self.views.push(StrView::long(bytes, self.heaps.len() as u32, offset));
    }

    /// Drops the strings from `len` on (their bytes stay in the heap unused).
    pub fn truncate(&mut self, len: usize) {
        self.views.truncate(len);
    }

    /// Appends the empty string as a placeholder (for NULL rows).
    #[inline]
    pub fn push_empty(&mut self) {
        self.views.push(StrView::default());
    }

    fn freeze_current(&mut self) {
        let full = std::mem::take(&mut self.current);
        self.heaps.push(Arc::new(full));
    }

    /// Registers another column's heaps; returns the index remapping to use with
    /// [`StrColumnBuilder::push_view`].
    pub fn adopt_heaps(&mut self, heaps: &[Heap]) -> Vec<u32> {
        let mut mapping = Vec::with_capacity(heaps.len());
        for heap in heaps {
            let key = Arc::as_ptr(heap) as usize;
            let position = match self.heap_positions.get(&key) {
                Some(&p) => p,
                None => {
                    // Keep the open heap's index (== heaps.len()) free: freeze it first.
                    if !self.current.is_empty() {
                        self.freeze_current();
                    }
                    let p = self.heaps.len() as u32;
                    self.heaps.push(Arc::clone(heap));
                    self.heap_positions.insert(key, p);
                    p
                }
            };
            mapping.push(position);
        }
        mapping
    }

    /// Appends a view of a column whose heaps were registered with `adopt_heaps`.
    #[inline]
    pub fn push_view(&mut self, view: StrView, mapping: &[u32]) {
        if view.is_inline() {
            self.views.push(view);
        } else {
            self.views.push(view.with_heap_index(mapping[view.heap_index() as usize]));
        }
    }

    /// Appends rows of `column` selected by `indices` (all rows when `None`), copying views.
    pub fn extend_from(&mut self, column: &StrColumn, indices: Option<&[u32]>) {
        let mapping = self.adopt_heaps(&column.heaps);
        let views = column.views().as_slice();
        let remap = |view: StrView| if view.is_inline() { view } else { view.with_heap_index(mapping[view.heap_index() as usize]) };
        match indices {
            Some(indices) => self.views.extend(indices.iter().map(|&i| remap(views[i as usize]))),
            None => self.views.extend(views.iter().map(|&v| remap(v))),
        }
    }

    pub fn finish(mut self) -> StrColumn {
        if !self.current.is_empty() {
            self.freeze_current();
        }
        StrColumn::new(Buffer::from_vec(self.views), Arc::new(self.heaps))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_and_long_strings() {
        let column = StrColumn::from_strs(["short", "", "a string longer than twelve bytes", "exactly12byt"]);
        assert_eq!(column.get(0), "short");
        assert_eq!(column.get(1), "");
        assert_eq!(column.get(2), "a string longer than twelve bytes");
        assert_eq!(column.get(3), "exactly12byt");
        assert!(column.views()[3].is_inline());
        assert!(!column.views()[2].is_inline());
    }

    #[test]
    fn extend_from_merges_heaps_once() {
        let a = StrColumn::from_strs(["first long string in a", "x"]);
        let b = StrColumn::from_strs(["second long string in b"]);
        let mut builder = StrColumnBuilder::new();
        builder.extend_from(&a, None);
        builder.extend_from(&b, Some(&[0]));
        builder.push("a third long string, own heap");
        builder.extend_from(&a, Some(&[0]));
        let merged = builder.finish();
        let values: Vec<&str> = (0..merged.len()).map(|i| merged.get(i)).collect();
        assert_eq!(
            values,
            ["first long string in a", "x", "second long string in b", "a third long string, own heap", "first long string in a"]
        );
        assert_eq!(merged.heaps.len(), 3);
    }

    #[test]
    fn view_equality() {
        let a = StrColumn::from_strs(["same long string here", "abc"]);
        let b = StrColumn::from_strs(["same long string here", "abd"]);
        assert!(a.views()[0].eq_in(&a.heaps, &b.views()[0], &b.heaps));
        assert!(!a.views()[1].eq_in(&a.heaps, &b.views()[1], &b.heaps));
    }

    #[test]
    fn a_column_of_codes_decodes_its_views_on_first_use() {
        let dictionary = StrColumn::from_strs(["a long value in the dictionary", "b", "c"]);
        let codes = DictionaryCodes { codes: Buffer::from_vec(vec![2, 0, 1, 1, 0, 2]), dictionary: 7, values: dictionary.views().clone() };
        let column = StrColumn::from_codes(codes, Arc::clone(&dictionary.heaps));
        assert!(!column.views_decoded());
        assert_eq!(column.len(), 6);
        assert!(column.allocated_bytes() < 6 * size_of::<StrView>());
        // Slices and gathers of the codes stay codes, and decode to the same values.
        let slice = column.slice(1, 4);
        let gathered = column.gather(&[5, 0, 4]);
        assert!(!slice.views_decoded() && !gathered.views_decoded() && !column.views_decoded());
        let values = |c: &StrColumn| (0..c.len()).map(|i| c.get(i).to_string()).collect::<Vec<_>>();
        assert_eq!(values(&slice), ["a long value in the dictionary", "b", "b", "a long value in the dictionary"]);
        assert_eq!(values(&gathered), ["c", "c", "a long value in the dictionary"]);
        assert_eq!(slice.codes.as_ref().map(|c| c.codes.to_vec()), Some(vec![0, 1, 1, 0]));
        // Once decoded, slices and gathers carry views and codes.
        assert_eq!(values(&column), ["c", "a long value in the dictionary", "b", "b", "a long value in the dictionary", "c"]);
        assert!(column.views_decoded());
        let decoded_slice = column.slice(2, 2);
        assert!(decoded_slice.views_decoded());
        assert_eq!(decoded_slice.codes.as_ref().map(|c| c.codes.to_vec()), Some(vec![1, 1]));
        assert_eq!(values(&decoded_slice), ["b", "b"]);
    }
}

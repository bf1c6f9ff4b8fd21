//! `Buffer<T>`: an immutable, reference-counted, sliceable array.
//!
//! Column stripes in storage are buffers; a scan hands out slices of them to vectors
//! without copying (a slice shares the allocation and records an offset and length).
//!
//! A buffer also keeps the address of its first element. Reading an element then needs
//! only the buffer's own fields: through the `Arc` it would reload the vector's pointer
//! and length from the shared allocation on every access, because the compiler cannot
//! prove that a store into an output vector in the same loop does not change them (the
//! key gathers of a hash-join probe spent most of their time on those reloads).
//!
//! Most buffers own a `Vec`; [`Buffer::from_foreign`] wraps memory another library owns
//! (an Arrow array handed over through the Arrow C data interface) without copying it.

use std::fmt;
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::Arc;

pub struct Buffer<T> {
    data: Arc<Storage<T>>,
    /// `data.as_ptr() + offset`: the vector is never modified or moved while shared, so
    /// the address stays valid as long as `data` is held.
    start: NonNull<T>,
    offset: usize,
    len: usize,
}

// SAFETY: a buffer is an `Arc<Vec<T>>` plus a read-only pointer into that vector; it is
// as thread-safe as the `Arc` (shared, immutable access to `T`).
unsafe impl<T: Send + Sync> Send for Buffer<T> {}
unsafe impl<T: Send + Sync> Sync for Buffer<T> {}

/// What keeps a buffer's memory alive. One `Arc` (a thin pointer), so that a buffer is
/// no larger for being able to hold foreign memory: vectors are moved around a lot.
enum Storage<T> {
    Vec(Vec<T>),
    /// Memory owned elsewhere, valid while `keep_alive` is held; `bytes` is its size.
    Foreign {
        _keep_alive: Box<dyn std::any::Any + Send + Sync>,
        bytes: usize,
    },
}

impl<T> Buffer<T> {
    pub fn from_vec(values: Vec<T>) -> Self {
        let len = values.len();
        // A vector's pointer is never null (dangling but aligned when empty).
        let start = NonNull::new(values.as_ptr().cast_mut()).expect("vector pointers are not null");
        Buffer { start, data: Arc::new(Storage::Vec(values)), offset: 0, len }
    }

    /// A buffer over `len` values at `start` that `keep_alive` owns (no copy).
    ///
    /// # Safety
    /// `start` must be aligned for `T` and point at `len` initialized values that stay
    /// valid and unmodified for as long as `keep_alive` is alive.
    pub unsafe fn from_foreign(keep_alive: Box<dyn std::any::Any + Send + Sync>, start: *const T, len: usize) -> Self {
        let start = if len == 0 { NonNull::dangling() } else { NonNull::new(start.cast_mut()).expect("foreign buffers are not null") };
        let bytes = len * size_of::<T>();
        Buffer { data: Arc::new(Storage::Foreign { _keep_alive: keep_alive, bytes }), start, offset: 0, len }
    }

    pub fn empty() -> Self {
        Buffer::from_vec(Vec::new())
    }

    /// A view of `len` elements starting at `offset` of this buffer (no copy).
    pub fn slice(&self, offset: usize, len: usize) -> Self {
        assert!(offset + len <= self.len, "slice {offset}+{len} out of buffer of {}", self.len);
        // SAFETY: `offset + len <= self.len`, so the slice stays inside this buffer.
        let start = unsafe { NonNull::new_unchecked(self.start.as_ptr().add(offset)) };
        Buffer { start, data: Arc::clone(&self.data), offset: self.offset + offset, len }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    pub fn as_slice(&self) -> &[T] {
        // SAFETY: `start` points at element `offset` of the vector `data` keeps alive and
        // unmodified, and `offset + len <= data.len()` (checked when the buffer was made).
        unsafe { std::slice::from_raw_parts(self.start.as_ptr(), self.len) }
    }

    /// The values as an owned vector: free when this buffer is the only owner of a whole
    /// allocation, otherwise a copy.
    pub fn into_vec(self) -> Vec<T>
    where
        T: Clone,
    {
        let whole = matches!(self.data.as_ref(), Storage::Vec(values) if self.offset == 0 && self.len == values.len());
        if !whole {
            return self.as_slice().to_vec();
        }
        let Buffer { data, .. } = self;
        match Arc::try_unwrap(data) {
            Ok(Storage::Vec(values)) => values,
            Ok(Storage::Foreign { .. }) => unreachable!("checked above: the storage is a vector"),
            Err(shared) => match shared.as_ref() {
                Storage::Vec(values) => values.clone(),
                Storage::Foreign { .. } => unreachable!("checked above: the storage is a vector"),
            },
        }
    }

    /// Bytes of memory held by the underlying allocation (shared allocations count fully).
    pub fn allocated_bytes(&self) -> usize {
        match self.data.as_ref() {
            Storage::Vec(values) => values.capacity() * size_of::<T>(),
            Storage::Foreign { bytes, .. } => *bytes,
        }
    }
}

impl<T> Clone for Buffer<T> {
    fn clone(&self) -> Self {
        Buffer { data: Arc::clone(&self.data), start: self.start, offset: self.offset, len: self.len }
    }
}

impl<T> Deref for Buffer<T> {
    type Target = [T];

    #[inline]
    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T> From<Vec<T>> for Buffer<T> {
    fn from(values: Vec<T>) -> Self {
        Buffer::from_vec(values)
    }
}

impl<T: fmt::Debug> fmt::Debug for Buffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice().iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn foreign_memory_is_read_in_place_and_kept_alive() {
        let owner: Arc<Vec<i64>> = Arc::new((0..10).collect());
        let start = owner.as_ptr();
        // SAFETY: the vector is never modified and the box keeps it alive.
        let buffer = unsafe { Buffer::from_foreign(Box::new(Arc::clone(&owner)), start, owner.len()) };
        assert_eq!(Arc::strong_count(&owner), 2);
        let slice = buffer.slice(2, 3);
        assert_eq!(slice.as_slice(), &[2, 3, 4]);
        assert_eq!(slice.as_slice().as_ptr(), owner[2..].as_ptr(), "a slice is a view, not a copy");
        assert_eq!(buffer.allocated_bytes(), 80);
        assert_eq!(slice.clone().into_vec(), vec![2, 3, 4]);
        drop((buffer, slice));
        assert_eq!(Arc::strong_count(&owner), 1, "the foreign owner is released with the last buffer");
    }

    #[test]
    fn into_vec_takes_a_sole_whole_vector_without_copying() {
        let values: Vec<i32> = (0..100).collect();
        let address = values.as_ptr();
        let back = Buffer::from_vec(values).into_vec();
        assert_eq!(back.as_ptr(), address);
        let shared = Buffer::from_vec(vec![1, 2, 3]);
        let other = shared.clone();
        assert_eq!(shared.into_vec(), vec![1, 2, 3]);
        assert_eq!(other.slice(1, 2).into_vec(), vec![2, 3]);
    }
}

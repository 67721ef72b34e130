//! A global allocator that starts every large allocation on a cache line.
//!
//! Kernels gather whole rows of dense operands: SpMM reads `B[j, k0..k0 + 32]` for each stored
//! entry `j`. glibc returns large blocks 16 bytes past a page boundary, so with the system
//! allocator every 256-byte chunk of a row spans five cache lines instead of four, and every
//! other 32-byte vector load is split across two lines. Measured side by side in one process
//! (the same C loop, B 64-byte aligned vs 16 bytes off, min of 20 runs each, AMD EPYC, one
//! thread): SpMM k = 128 on cage10 2.47 vs 2.87 ms, on cit-HepPh 14.9 vs 17.4 ms.
//!
//! [`CacheAligned`] raises the alignment of allocations of at least [`CacheAligned::MIN_SIZE`]
//! bytes to [`CacheAligned::LINE`] and passes everything else to [`System`] unchanged. The
//! `lacuna` binary and the Python extension install it with `#[global_allocator]`; a program
//! embedding the library may do the same.

use std::alloc::{GlobalAlloc, Layout, System};

/// The system allocator, with allocations of at least [`CacheAligned::MIN_SIZE`] bytes aligned
/// to a cache line ([`CacheAligned::LINE`] bytes).
#[derive(Clone, Copy, Debug, Default)]
pub struct CacheAligned;

impl CacheAligned {
    /// The alignment of large allocations: one cache line of x86-64 and most AArch64 cores.
    pub const LINE: usize = 64;
    /// Allocations of at least this many bytes are cache-line aligned; smaller ones keep their
    /// own alignment (no padding for the many small strings and vectors of the compiler).
    pub const MIN_SIZE: usize = 4096;

    /// The layout handed to the system allocator for a request of `layout`. A pure function of
    /// the layout, so `dealloc` and `realloc` see the same adjusted layout as `alloc` did.
    pub fn adjusted(layout: Layout) -> Layout {
        if layout.size() >= Self::MIN_SIZE && layout.align() < Self::LINE {
            // Only a size within a line of isize::MAX fails; it keeps its own alignment (the
            // same answer every time, which is all `dealloc` needs).
            Layout::from_size_align(layout.size(), Self::LINE).unwrap_or(layout)
        } else {
            layout
        }
    }
}

// SAFETY: every method forwards to `System` with `adjusted(layout)`, a valid layout of the same
// size and at least the requested alignment; `dealloc` and `realloc` recompute the same
// adjusted layout from the layout the block was allocated with, as `System` requires.
unsafe impl GlobalAlloc for CacheAligned {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded contract (non-zero size, as the caller guarantees).
        unsafe { System.alloc(Self::adjusted(layout)) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        unsafe { System.alloc_zeroed(Self::adjusted(layout)) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator with `layout`, so from `System` with
        // `adjusted(layout)`.
        unsafe { System.dealloc(ptr, Self::adjusted(layout)) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old = Self::adjusted(layout);
        // The caller guarantees `new_size` with `layout.align()` is a valid layout.
        let Ok(requested) = Layout::from_size_align(new_size, layout.align()) else {
            return std::ptr::null_mut();
        };
        let new = Self::adjusted(requested);
        if new.align() == old.align() {
            // SAFETY: `ptr` was allocated by `System` with `old`, whose alignment the new
            // block keeps.
            return unsafe { System.realloc(ptr, old, new_size) };
        }
        // The block crosses `MIN_SIZE`: a new block of the other alignment, then a copy.
        // SAFETY: `new` has a non-zero size (`new_size` > 0 by the caller's contract).
        let fresh = unsafe { System.alloc(new) };
        if !fresh.is_null() {
            // SAFETY: both blocks hold at least `min(old, new)` bytes and do not overlap;
            // `ptr` was allocated with `old`.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, fresh, layout.size().min(new_size));
                System.dealloc(ptr, old);
            }
        }
        fresh
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_blocks_start_on_a_cache_line_and_small_ones_keep_their_alignment() {
        let a = CacheAligned;
        for size in [CacheAligned::MIN_SIZE, 1 << 20, (8 << 20) + 8] {
            let l = Layout::from_size_align(size, 8).unwrap();
            // SAFETY: non-zero size; freed with the same layout.
            unsafe {
                let p = a.alloc(l);
                assert!(!p.is_null());
                assert_eq!(p as usize % CacheAligned::LINE, 0, "{size} bytes");
                a.dealloc(p, l);
                let z = a.alloc_zeroed(l);
                assert_eq!(z as usize % CacheAligned::LINE, 0, "{size} bytes zeroed");
                assert!(std::slice::from_raw_parts(z, size).iter().all(|&b| b == 0));
                a.dealloc(z, l);
            }
        }
        let l = Layout::from_size_align(24, 8).unwrap();
        assert_eq!(CacheAligned::adjusted(l), l);
        let wide = Layout::from_size_align(1 << 16, 128).unwrap();
        assert_eq!(
            CacheAligned::adjusted(wide),
            wide,
            "a larger alignment is kept"
        );
    }

    #[test]
    fn realloc_across_the_threshold_keeps_the_contents_and_the_alignment() {
        let a = CacheAligned;
        let small = Layout::from_size_align(1000, 8).unwrap();
        // SAFETY: every block is used within its size and freed with its current layout.
        unsafe {
            let p = a.alloc(small);
            for i in 0..1000 {
                *p.add(i) = (i % 251) as u8;
            }
            let big = a.realloc(p, small, 100_000);
            assert!(!big.is_null());
            assert_eq!(big as usize % CacheAligned::LINE, 0);
            assert!((0..1000).all(|i| *big.add(i) == (i % 251) as u8));
            let big_layout = Layout::from_size_align(100_000, 8).unwrap();
            let bigger = a.realloc(big, big_layout, 300_000);
            assert_eq!(bigger as usize % CacheAligned::LINE, 0);
            assert!((0..1000).all(|i| *bigger.add(i) == (i % 251) as u8));
            let bigger_layout = Layout::from_size_align(300_000, 8).unwrap();
            let back = a.realloc(bigger, bigger_layout, 500);
            assert!((0..500).all(|i| *back.add(i) == (i % 251) as u8));
            a.dealloc(back, Layout::from_size_align(500, 8).unwrap());
        }
    }
}

//! A global allocator for arrays: large blocks start on a cache line, very large ones on a huge
//! page.
//!
//! Kernels gather whole rows of dense operands: SpMM reads `B[j, k0..k0 + 32]` for each stored
//! entry `j`. glibc returns large blocks 16 bytes past a page boundary, so with the system
//! allocator every 256-byte chunk of a row spans five cache lines instead of four, and every
//! other 32-byte vector load is split across two lines. Measured side by side in one process
//! (the same C loop, B 64-byte aligned vs 16 bytes off, min of 20 runs each, AMD EPYC, one
//! thread): SpMM k = 128 on cage10 2.47 vs 2.87 ms, on cit-HepPh 14.9 vs 17.4 ms.
//!
//! Very large blocks are a second case. A gather such as SpMV's `x[col[j]]` on a graph with
//! randomly numbered vertices touches a new 4 KiB page on almost every access, and beyond the
//! few thousand pages the TLB maps every such access also walks the page table. numpy asks
//! the kernel for transparent huge pages on every array of 4 MiB or more
//! (`madvise(MADV_HUGEPAGE)`), so the reference libraries, fed numpy arrays, get 2 MiB pages
//! for free; a Rust program with the system allocator does not.
//!
//! [`CacheAligned`] therefore sorts allocations by size:
//! - below [`CacheAligned::MIN_SIZE`] bytes: passed to [`System`] unchanged (the many small
//!   strings and vectors of the compiler);
//! - from [`CacheAligned::MIN_SIZE`]: [`System`], aligned to [`CacheAligned::LINE`];
//! - from [`CacheAligned::HUGE_MIN_SIZE`] on Linux: a private anonymous mapping of whole 2 MiB
//!   pages, starting on a 2 MiB boundary and advised `MADV_HUGEPAGE`, so that the kernel can
//!   back all of it with huge pages (it still decides: with transparent huge pages off it
//!   uses 4 KiB pages, and nothing else changes). Growing such a block remaps it in place of
//!   a copy (`mremap`). Fresh mappings are zero, so zeroed allocations cost nothing extra.
//!
//! The `lacuna` binary and the Python extension install it with `#[global_allocator]`; a
//! program embedding the library may do the same.

use std::alloc::{GlobalAlloc, Layout, System};

/// The system allocator, with allocations of at least [`CacheAligned::MIN_SIZE`] bytes aligned
/// to a cache line ([`CacheAligned::LINE`] bytes) and, on Linux, allocations of at least
/// [`CacheAligned::HUGE_MIN_SIZE`] bytes mapped on huge-page boundaries and advised to use
/// transparent huge pages.
#[derive(Clone, Copy, Debug, Default)]
pub struct CacheAligned;

/// Where a block of a given layout comes from: a pure function of the layout, so that
/// `dealloc` and `realloc` find the block where `alloc` put it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    /// [`System`], with this (possibly raised) layout.
    System(Layout),
    /// A mapping of whole huge pages ([`huge`]).
    Huge,
}

impl CacheAligned {
    /// The alignment of large allocations: one cache line of x86-64 and most AArch64 cores.
    pub const LINE: usize = 64;
    /// Allocations of at least this many bytes are cache-line aligned; smaller ones keep their
    /// own alignment (no padding for the many small strings and vectors of the compiler).
    pub const MIN_SIZE: usize = 4096;
    /// Allocations of at least this many bytes (numpy's threshold) are mapped on 2 MiB
    /// boundaries and advised to use transparent huge pages, on Linux.
    pub const HUGE_MIN_SIZE: usize = 4 << 20;

    /// The layout handed to the system allocator for a request of `layout` below the huge
    /// class. A pure function of the layout, so `dealloc` and `realloc` see the same adjusted
    /// layout as `alloc` did.
    pub fn adjusted(layout: Layout) -> Layout {
        if layout.size() >= Self::MIN_SIZE && layout.align() < Self::LINE {
            // Only a size within a line of isize::MAX fails; it keeps its own alignment (the
            // same answer every time, which is all `dealloc` needs).
            Layout::from_size_align(layout.size(), Self::LINE).unwrap_or(layout)
        } else {
            layout
        }
    }

    fn class(layout: Layout) -> Class {
        // A remapped block is only page-aligned, so a stricter alignment stays with `System`.
        if huge::AVAILABLE
            && layout.size() >= Self::HUGE_MIN_SIZE
            && layout.align() <= huge::MIN_PAGE
        {
            Class::Huge
        } else {
            Class::System(Self::adjusted(layout))
        }
    }
}

// SAFETY: a block's class is a pure function of its layout, so every method finds a block
// where `alloc` put it. System blocks are forwarded with `adjusted(layout)`, a valid layout of
// the same size and at least the requested alignment. Huge blocks are mappings of at least
// the requested size whose start is page-aligned (at least the requested alignment, which
// `class` bounds by the smallest page); `huge` maps and unmaps them.
unsafe impl GlobalAlloc for CacheAligned {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match Self::class(layout) {
            // SAFETY: forwarded contract (non-zero size, as the caller guarantees).
            Class::System(l) => unsafe { System.alloc(l) },
            Class::Huge => huge::map(layout.size()),
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match Self::class(layout) {
            // SAFETY: as `alloc`.
            Class::System(l) => unsafe { System.alloc_zeroed(l) },
            // A fresh anonymous mapping reads as zeros.
            Class::Huge => huge::map(layout.size()),
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match Self::class(layout) {
            // SAFETY: `ptr` came from this allocator with `layout`, so from `System` with
            // `adjusted(layout)`.
            Class::System(l) => unsafe { System.dealloc(ptr, l) },
            // SAFETY: `ptr` came from `huge::map` or `huge::remap` for `layout.size()` bytes.
            Class::Huge => unsafe { huge::unmap(ptr, layout.size()) },
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // The caller guarantees `new_size` with `layout.align()` is a valid layout.
        let Ok(requested) = Layout::from_size_align(new_size, layout.align()) else {
            return std::ptr::null_mut();
        };
        match (Self::class(layout), Self::class(requested)) {
            // SAFETY: `ptr` is a huge block of `layout.size()` bytes.
            (Class::Huge, Class::Huge) => unsafe { huge::remap(ptr, layout.size(), new_size) },
            (Class::System(old), Class::System(new)) if new.align() == old.align() => {
                // SAFETY: `ptr` was allocated by `System` with `old`, whose alignment the new
                // block keeps.
                unsafe { System.realloc(ptr, old, new_size) }
            }
            _ => {
                // The block changes class: a new block, then a copy.
                // SAFETY: `requested` has a non-zero size (`new_size` > 0 by the caller's
                // contract).
                let fresh = unsafe { self.alloc(requested) };
                if !fresh.is_null() {
                    // SAFETY: both blocks hold at least `min(old, new)` bytes and do not
                    // overlap; `ptr` was allocated with `layout`.
                    unsafe {
                        std::ptr::copy_nonoverlapping(ptr, fresh, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                }
                fresh
            }
        }
    }
}

/// Blocks of whole huge pages: private anonymous mappings, advised `MADV_HUGEPAGE`.
#[cfg(target_os = "linux")]
mod huge {
    /// Whether this platform has the huge class.
    pub const AVAILABLE: bool = true;
    /// The smallest page size Linux uses; every mapping starts on such a boundary.
    pub const MIN_PAGE: usize = 4096;
    /// The transparent huge page of x86-64 and of AArch64 with 4 KiB pages.
    const HUGE_PAGE: usize = 2 << 20;

    /// The mapped length of a block of `size` bytes: whole huge pages (a multiple of every
    /// base page size), or `None` when that overflows.
    fn mapped_len(size: usize) -> Option<usize> {
        Some(size.checked_add(HUGE_PAGE - 1)? & !(HUGE_PAGE - 1))
    }

    /// Advises the kernel to back `[ptr, ptr + len)` with huge pages. Advice only: without
    /// transparent huge pages it fails and the block keeps base pages.
    fn advise(ptr: *mut libc::c_void, len: usize) {
        // SAFETY: `[ptr, ptr + len)` is a mapping this module owns; MADV_HUGEPAGE changes no
        // contents.
        unsafe { libc::madvise(ptr, len, libc::MADV_HUGEPAGE) };
    }

    /// A new zeroed block of at least `size` bytes starting on a huge-page boundary, or null.
    pub fn map(size: usize) -> *mut u8 {
        let Some(len) = mapped_len(size) else {
            return std::ptr::null_mut();
        };
        let Some(total) = len.checked_add(HUGE_PAGE) else {
            return std::ptr::null_mut();
        };
        // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return std::ptr::null_mut();
        }
        // Keep the huge-page-aligned `len` bytes inside the `len + HUGE_PAGE` mapped; give the
        // rest back. Both pieces are page-aligned because `raw` and `len` are.
        let start = raw as usize;
        let aligned = start.next_multiple_of(HUGE_PAGE);
        let lead = aligned - start;
        let trail = total - lead - len;
        // SAFETY: both ranges lie inside the mapping just made and outside the kept block.
        unsafe {
            if lead > 0 {
                libc::munmap(raw, lead);
            }
            if trail > 0 {
                libc::munmap((aligned + len) as *mut libc::c_void, trail);
            }
        }
        advise(aligned as *mut libc::c_void, len);
        aligned as *mut u8
    }

    /// Frees a block from [`map`] or [`remap`] of `size` bytes.
    ///
    /// # Safety
    /// `ptr` must be such a block, not used afterwards.
    pub unsafe fn unmap(ptr: *mut u8, size: usize) {
        if let Some(len) = mapped_len(size) {
            // SAFETY: the block's whole mapping, by the caller's contract.
            unsafe { libc::munmap(ptr.cast(), len) };
        }
    }

    /// Resizes a block from [`map`] or [`remap`] of `old` bytes to `new` bytes, keeping its
    /// contents, moving it when it cannot grow in place; null (the block untouched) on
    /// failure. The result is page-aligned, and on a huge-page boundary when not moved.
    ///
    /// # Safety
    /// `ptr` must be such a block of `old` bytes.
    pub unsafe fn remap(ptr: *mut u8, old: usize, new: usize) -> *mut u8 {
        let (Some(old_len), Some(new_len)) = (mapped_len(old), mapped_len(new)) else {
            return std::ptr::null_mut();
        };
        if old_len == new_len {
            return ptr;
        }
        // SAFETY: `[ptr, ptr + old_len)` is the block's whole mapping (caller's contract).
        let p = unsafe { libc::mremap(ptr.cast(), old_len, new_len, libc::MREMAP_MAYMOVE) };
        if p == libc::MAP_FAILED {
            return std::ptr::null_mut();
        }
        advise(p, new_len);
        p.cast()
    }
}

/// No huge class off Linux: every block goes to [`System`].
#[cfg(not(target_os = "linux"))]
mod huge {
    pub const AVAILABLE: bool = false;
    pub const MIN_PAGE: usize = 0;
    pub fn map(_size: usize) -> *mut u8 {
        std::ptr::null_mut()
    }
    pub unsafe fn unmap(_ptr: *mut u8, _size: usize) {}
    pub unsafe fn remap(_ptr: *mut u8, _old: usize, _new: usize) -> *mut u8 {
        std::ptr::null_mut()
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

    /// The `VmFlags` of the mapping of this process that contains `addr`.
    #[cfg(target_os = "linux")]
    fn vm_flags(addr: usize) -> Option<String> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ') {
                if let Some((lo, hi)) = range.split_once('-') {
                    if let (Ok(lo), Ok(hi)) =
                        (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                    {
                        inside = (lo..hi).contains(&addr);
                        continue;
                    }
                }
            }
            if inside {
                if let Some(flags) = line.strip_prefix("VmFlags:") {
                    return Some(flags.trim().to_string());
                }
            }
        }
        None
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn very_large_blocks_are_zeroed_huge_page_mappings_that_grow_and_shrink_in_place_of_copies() {
        const HUGE_PAGE: usize = 2 << 20;
        let a = CacheAligned;
        let size = CacheAligned::HUGE_MIN_SIZE + 8;
        let l = Layout::from_size_align(size, 8).unwrap();
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .is_ok_and(|s| !s.contains("[never]"));
        // SAFETY: every block is used within its size and freed with its current layout.
        unsafe {
            let z = a.alloc_zeroed(l);
            assert!(!z.is_null());
            assert_eq!(z as usize % HUGE_PAGE, 0, "starts on a huge page");
            let zs = std::slice::from_raw_parts_mut(z, size);
            assert!(zs.iter().all(|&b| b == 0));
            for (i, b) in zs.iter_mut().enumerate() {
                *b = (i % 253) as u8;
            }
            if thp {
                let flags = vm_flags(z as usize).expect("the block is a mapping of its own");
                assert!(
                    flags.split(' ').any(|f| f == "hg"),
                    "advised MADV_HUGEPAGE: {flags}"
                );
            }
            // Grow (a remap), then shrink within the class, then leave it.
            let grown = a.realloc(z, l, 3 * size);
            assert!(!grown.is_null());
            assert_eq!(grown as usize % CacheAligned::LINE, 0);
            assert!((0..size).all(|i| *grown.add(i) == (i % 253) as u8));
            std::ptr::write_bytes(grown.add(size), 7, 2 * size);
            let grown_l = Layout::from_size_align(3 * size, 8).unwrap();
            let shrunk = a.realloc(grown, grown_l, size - 8);
            assert!((0..size - 8).all(|i| *shrunk.add(i) == (i % 253) as u8));
            let shrunk_l = Layout::from_size_align(size - 8, 8).unwrap();
            let small = a.realloc(shrunk, shrunk_l, 100);
            assert!((0..100).all(|i| *small.add(i) == (i % 253) as u8));
            // And back into the class from below it.
            let again = a.realloc(small, Layout::from_size_align(100, 8).unwrap(), size);
            assert_eq!(again as usize % HUGE_PAGE, 0);
            assert!((0..100).all(|i| *again.add(i) == (i % 253) as u8));
            a.dealloc(again, l);
        }
        // A stricter alignment than a page stays with the system allocator.
        let strict = Layout::from_size_align(size, 8192).unwrap();
        assert_eq!(CacheAligned::class(strict), Class::System(strict));
        assert_eq!(CacheAligned::class(l), Class::Huge);
    }
}

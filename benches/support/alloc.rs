//! A global allocator that counts live heap bytes and allocation calls once switched on (the
//! memory workload's child process and `layer_cost` switch it on); off, it costs one relaxed load
//! per call.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicU64, Ordering::Relaxed};

/// Counts live heap bytes while [`ON`] is set.
#[derive(Debug)]
pub struct Counting;

/// Whether allocations are counted.
pub static ON: AtomicBool = AtomicBool::new(false);
/// Live bytes allocated since counting started.
pub static LIVE: AtomicIsize = AtomicIsize::new(0);
/// Allocation calls (`alloc`, `alloc_zeroed`, `realloc`) since counting started.
pub static CALLS: AtomicU64 = AtomicU64::new(0);
/// Bytes asked for by those calls (a `realloc` counts its new size).
pub static ASKED: AtomicU64 = AtomicU64::new(0);

fn count(size: usize) {
    CALLS.fetch_add(1, Relaxed);
    ASKED.fetch_add(size as u64, Relaxed);
}

// SAFETY: forwards every call to the system allocator unchanged and only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if ON.load(Relaxed) {
            LIVE.fetch_add(l.size() as isize, Relaxed);
            count(l.size());
        }
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        if ON.load(Relaxed) {
            LIVE.fetch_sub(l.size() as isize, Relaxed);
        }
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        if ON.load(Relaxed) {
            LIVE.fetch_add(l.size() as isize, Relaxed);
            count(l.size());
        }
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        if ON.load(Relaxed) {
            LIVE.fetch_add(new as isize - l.size() as isize, Relaxed);
            count(new);
        }
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.realloc(p, l, new) }
    }
}

/// Resident bytes of this process, from `/proc/self/statm` (0 where it cannot be read).
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

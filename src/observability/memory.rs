//! Resident memory: read from `/proc`, and freed start-up memory handed back to the system.
//!
//! Loading a snapshot builds large short-lived buffers (model files read whole, an adapted model
//! patched in memory, ONNX Runtime's parse of it). Once they are freed, glibc keeps most of their
//! pages: freeing a large mapped block raises its mmap threshold, so later blocks of that size
//! come from the heap, and a heap only shrinks from its top. With the quickstart's configuration
//! that is about 90 MB held for nothing. [`release_freed`] asks glibc to return every free page
//! once, after a snapshot loads; requests never pay for it.

/// This process's resident set in bytes (`VmRSS`), where `/proc` has it.
pub fn resident_bytes() -> Option<u64> {
    resident_bytes_of(std::process::id())
}

/// The resident set in bytes (`VmRSS`) of process `pid`, where `/proc` has it.
pub fn resident_bytes_of(pid: u32) -> Option<u64> {
    status_bytes(pid, "VmRSS:")
}

/// The largest resident set in bytes process `pid` has had (`VmHWM`), where `/proc` has it.
pub fn peak_resident_bytes_of(pid: u32) -> Option<u64> {
    status_bytes(pid, "VmHWM:")
}

/// A `/proc/PID/status` line counted in kB (`VmRSS:   1234 kB`), in bytes.
fn status_bytes(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with(field))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Returns the allocator's free pages to the system and logs the resident set before and after.
/// Call it after a snapshot has loaded and the buffers that built it are dropped.
pub fn release_freed(reason: &'static str) {
    let before = resident_bytes();
    if !trim() {
        return;
    }
    let after = resident_bytes();
    let peak = peak_resident_bytes_of(std::process::id());
    if let (Some(before), Some(after), Some(peak)) = (before, after, peak) {
        tracing::info!(
            reason,
            rss_before_mib = before / (1024 * 1024),
            rss_after_mib = after / (1024 * 1024),
            rss_peak_mib = peak / (1024 * 1024),
            "freed memory returned to the system"
        );
    }
}

/// Whether the allocator could be asked: glibc's `malloc_trim` on Linux, nothing elsewhere.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[expect(
    unsafe_code,
    reason = "malloc_trim has no safe wrapper; it takes an integer and touches only free memory"
)]
fn trim() -> bool {
    // SAFETY: malloc_trim(0) walks glibc's arenas under their own locks and releases only pages
    // of free chunks; it reads no pointer from us and is safe to call from any thread at any time.
    unsafe { libc::malloc_trim(0) };
    true
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resident_set_is_read_from_proc_in_bytes() {
        if !std::path::Path::new("/proc/self/status").exists() {
            return;
        }
        let Some(bytes) = resident_bytes() else {
            panic!("/proc/self/status has no readable VmRSS line");
        };
        // A test binary maps at least its own code, and never a terabyte.
        assert!(bytes > 1024 * 1024 && bytes < 1 << 40, "{bytes}");
        assert_eq!(bytes % 1024, 0);
        let peak = peak_resident_bytes_of(std::process::id()).unwrap();
        assert!(peak >= bytes, "peak {peak} under the resident set {bytes}");
    }
}

//! The JSONL sink: one JSON record per line, appended to a file that is rotated when it would
//! pass its size bound (`runs.jsonl` → `runs.jsonl.1` → … → `runs.jsonl.N`, the oldest dropped),
//! so the records never take more than about `(N + 1) × maxBytes`.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// An append-only file with size-bounded rotation.
pub(super) struct Rotating {
    path: PathBuf,
    max_bytes: u64,
    max_files: u32,
    file: Option<BufWriter<File>>,
    size: u64,
}

impl Rotating {
    pub(super) fn new(path: &Path, max_bytes: u64, max_files: u32) -> Self {
        Self {
            path: path.to_owned(),
            max_bytes,
            max_files,
            file: None,
            size: 0,
        }
    }

    /// Appends one line (a newline is added).
    pub(super) fn write_line(&mut self, line: &[u8]) -> io::Result<()> {
        let added = line.len() as u64 + 1;
        if self.file.is_none() {
            self.open()?;
        }
        if self.size > 0 && self.size + added > self.max_bytes {
            self.rotate()?;
        }
        let file = match &mut self.file {
            Some(file) => file,
            None => return Err(io::Error::other("the record file is not open")),
        };
        file.write_all(line)?;
        file.write_all(b"\n")?;
        self.size += added;
        Ok(())
    }

    /// Writes buffered lines to the file.
    pub(super) fn flush(&mut self) -> io::Result<()> {
        match &mut self.file {
            Some(file) => file.flush(),
            None => Ok(()),
        }
    }

    fn open(&mut self) -> io::Result<()> {
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        self.size = file.metadata()?.len();
        self.file = Some(BufWriter::new(file));
        Ok(())
    }

    fn rotate(&mut self) -> io::Result<()> {
        if let Some(mut file) = self.file.take() {
            file.flush()?;
        }
        let numbered = |n: u32| PathBuf::from(format!("{}.{n}", self.path.display()));
        if self.max_files == 0 {
            std::fs::remove_file(&self.path)?;
        } else {
            for n in (1..self.max_files).rev() {
                if numbered(n).exists() {
                    std::fs::rename(numbered(n), numbered(n + 1))?;
                }
            }
            std::fs::rename(&self.path, numbered(1))?;
        }
        self.open()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_rotate_at_the_bound_and_the_oldest_is_dropped() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("runs.jsonl");
        let mut sink = Rotating::new(&path, 20, 2);
        for i in 0..7 {
            sink.write_line(format!("record-{i:03}").as_bytes())
                .unwrap_or_else(|e| panic!("{e}"));
        }
        sink.flush().unwrap_or_else(|e| panic!("{e}"));
        let read = |p: PathBuf| std::fs::read_to_string(p).unwrap_or_default();
        // 11 bytes a line, 20 a file: one line per file; two rotated files kept.
        assert_eq!(read(path.clone()), "record-006\n");
        assert_eq!(read(dir.path().join("runs.jsonl.1")), "record-005\n");
        assert_eq!(read(dir.path().join("runs.jsonl.2")), "record-004\n");
        assert!(!dir.path().join("runs.jsonl.3").exists());
    }
}

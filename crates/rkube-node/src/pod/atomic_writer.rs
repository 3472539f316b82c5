//! Writes a volume's files so a reader never sees half an update, as
//! kubelet's `pkg/volume/util/atomic_writer.go`: the files go into a fresh
//! hidden directory `..<timestamp>`, the symlink `..data` is switched to it
//! with one `rename`, and each visible top-level name is a symlink through
//! `..data` (`key -> ..data/key`). A process that opened `key` before the
//! swap keeps reading the old version; one that opens it after reads the
//! new one. Unchanged contents are not rewritten.

use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Component, Path};

/// One file to write: contents and permission bits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileData {
    /// The contents.
    pub bytes: Vec<u8>,
    /// Permission bits (`0o644`); only the low 9 bits are used.
    pub mode: u32,
}

/// The link every visible name goes through.
pub const DATA_DIR: &str = "..data";

/// Checks a relative path of a volume item as upstream's
/// `validatePayload`: not absolute, no `..` component, not empty, not
/// starting with `..`. Errors: `InvalidInput` naming the path.
pub fn validate_path(path: &str) -> io::Result<()> {
    let p = Path::new(path);
    let bad = path.is_empty()
        || path.starts_with("..")
        || p.is_absolute()
        || p.components().any(|c| !matches!(c, Component::Normal(_)));
    if bad {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("invalid path {path:?}")));
    }
    Ok(())
}

/// Makes `dir` hold exactly `files` (relative paths), swapping them in at
/// once. Returns whether anything changed. Errors: the file system's, or
/// an invalid path (nothing is changed then).
pub fn write(dir: &Path, files: &BTreeMap<String, FileData>) -> io::Result<bool> {
    for path in files.keys() {
        validate_path(path)?;
    }
    std::fs::create_dir_all(dir)?;
    let data_link = dir.join(DATA_DIR);
    let old_target = std::fs::read_link(&data_link).ok();
    if let Some(old) = &old_target {
        if same_contents(&dir.join(old), files) {
            return Ok(false);
        }
    }
    let stamp = chrono_like_stamp();
    let ts_name = format!("..{stamp}");
    let ts_dir = dir.join(&ts_name);
    std::fs::create_dir(&ts_dir)?;
    std::fs::set_permissions(&ts_dir, std::fs::Permissions::from_mode(0o755))?;
    for (path, f) in files {
        let target = ts_dir.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&target, &f.bytes)?;
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(f.mode & 0o777))?;
    }
    let tmp_link = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp_link);
    std::os::unix::fs::symlink(&ts_name, &tmp_link)?;
    std::fs::rename(&tmp_link, &data_link)?;
    // Visible names: one symlink per top-level component.
    let tops: std::collections::BTreeSet<String> =
        files.keys().filter_map(|p| p.split('/').next().map(String::from)).collect();
    for top in &tops {
        let link = dir.join(top);
        let want = Path::new(DATA_DIR).join(top);
        if std::fs::read_link(&link).ok().as_deref() != Some(want.as_path()) {
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(&want, &link)?;
        }
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("..") || tops.contains(&name) {
            continue;
        }
        if entry.file_type()?.is_symlink() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    if let Some(old) = old_target {
        if old != Path::new(&ts_name) {
            let _ = std::fs::remove_dir_all(dir.join(old));
        }
    }
    Ok(true)
}

/// Whether `dir` holds exactly `files` with their modes.
fn same_contents(dir: &Path, files: &BTreeMap<String, FileData>) -> bool {
    let mut on_disk = Vec::new();
    if collect(dir, dir, &mut on_disk).is_err() || on_disk.len() != files.len() {
        return false;
    }
    files.iter().all(|(path, f)| {
        let p = dir.join(path);
        let mode_ok = std::fs::metadata(&p).is_ok_and(|m| m.permissions().mode() & 0o777 == f.mode & 0o777);
        mode_ok && std::fs::read(&p).is_ok_and(|b| b == f.bytes)
    })
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<String>) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            collect(root, &entry.path(), out)?;
        } else if let Ok(rel) = entry.path().strip_prefix(root) {
            out.push(rel.to_string_lossy().into_owned());
        }
    }
    Ok(())
}

/// `YYYY_MM_DD_HH_MM_SS.<nanoseconds>` in UTC, as kubelet names its data
/// directories (unique per write).
fn chrono_like_stamp() -> String {
    let now = k8s_openapi::jiff::Timestamp::now();
    let z = now.to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC);
    format!(
        "{:04}_{:02}_{:02}_{:02}_{:02}_{:02}.{:09}",
        z.year(),
        z.month(),
        z.day(),
        z.hour(),
        z.minute(),
        z.second(),
        now.subsec_nanosecond()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(pairs: &[(&str, &str)]) -> BTreeMap<String, FileData> {
        pairs.iter().map(|(k, v)| (k.to_string(), FileData { bytes: v.as_bytes().to_vec(), mode: 0o644 })).collect()
    }

    #[test]
    fn files_are_reached_through_the_data_link_and_updates_swap_it() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        assert!(write(dir, &files(&[("a", "1"), ("sub/b", "2")])).unwrap());
        assert_eq!(std::fs::read_to_string(dir.join("a")).unwrap(), "1");
        assert_eq!(std::fs::read_to_string(dir.join("sub/b")).unwrap(), "2");
        assert_eq!(std::fs::read_link(dir.join("a")).unwrap(), Path::new("..data/a"));
        let first = std::fs::read_link(dir.join(DATA_DIR)).unwrap();
        // Same contents: nothing is rewritten.
        assert!(!write(dir, &files(&[("a", "1"), ("sub/b", "2")])).unwrap());
        assert_eq!(std::fs::read_link(dir.join(DATA_DIR)).unwrap(), first);
        // An update swaps the link, drops removed names and the old data.
        assert!(write(dir, &files(&[("a", "3")])).unwrap());
        assert_eq!(std::fs::read_to_string(dir.join("a")).unwrap(), "3");
        assert!(!dir.join("sub").exists());
        assert!(!dir.join(&first).exists());
        let hidden: Vec<String> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        assert_eq!(hidden.iter().filter(|n| n.starts_with("..") && n.as_str() != DATA_DIR).count(), 1, "{hidden:?}");
    }

    #[test]
    fn modes_are_applied_and_a_mode_change_is_an_update() {
        let tmp = tempfile::tempdir().unwrap();
        let mut f = files(&[("k", "v")]);
        write(tmp.path(), &f).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&tmp.path().join("k")), 0o644);
        f.get_mut("k").unwrap().mode = 0o400;
        assert!(write(tmp.path(), &f).unwrap());
        assert_eq!(mode(&tmp.path().join("k")), 0o400);
    }

    #[test]
    fn paths_escaping_the_volume_are_refused() {
        for bad in ["", "/etc/passwd", "../x", "a/../../x", "..data/x", "a//b/../c"] {
            assert!(validate_path(bad).is_err(), "{bad}");
        }
        assert!(validate_path("a/b.txt").is_ok());
        let tmp = tempfile::tempdir().unwrap();
        assert!(write(tmp.path(), &files(&[("../x", "1")])).is_err());
        assert!(!tmp.path().join(DATA_DIR).exists());
    }
}

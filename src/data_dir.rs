//! The data directory's permissions. It holds secrets — the database (stream tokens, SRT
//! passphrases, PULL credentials), the API key, the RTMPS private key — so it is the owner's
//! only: the directory 0700, the files in it 0600, whatever the umask. Input: the directory;
//! outputs: the directory made private, or a [`DataDirError`]; a `warn` line for each path
//! found looser (an older version made them 0755/0644).

use std::fs::{DirBuilder, OpenOptions, Permissions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The data directory: only its owner (the daemon's user) may list or enter it.
pub const DIR_MODE: u32 = 0o700;
/// Files in it: only their owner may read them.
pub const FILE_MODE: u32 = 0o600;

#[derive(Debug, thiserror::Error)]
#[error("data directory {}: {source}", path.display())]
pub struct DataDirError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DataDirError + '_ {
    move |source| DataDirError {
        path: path.to_owned(),
        source,
    }
}

/// Creates `dir` 0700 if absent, else tightens it and the files directly in it. Blocking.
pub fn prepare(dir: &Path) -> Result<(), DataDirError> {
    // `mode` is filtered by the umask, which can only take bits away from 0700.
    DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
        .map_err(io(dir))?;
    tighten(dir, DIR_MODE)?;
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        // Regular files only: media and videos are directories, private through this one.
        if entry.file_type().map_err(io(dir))?.is_file() {
            tighten(&entry.path(), FILE_MODE)?;
        }
    }
    Ok(())
}

/// Takes away every permission `path` has beyond `mode`, with a warning naming what it had.
fn tighten(path: &Path, mode: u32) -> Result<(), DataDirError> {
    let old = std::fs::metadata(path)
        .map_err(io(path))?
        .permissions()
        .mode()
        & 0o7777;
    if old & !mode != 0 {
        std::fs::set_permissions(path, Permissions::from_mode(old & mode)).map_err(io(path))?;
        tracing::warn!(
            path = %path.display(),
            old_mode = %format!("{old:04o}"),
            new_mode = %format!("{:04o}", old & mode),
            "data directory permissions were too open; tightened"
        );
    }
    Ok(())
}

/// Creates `path` empty with mode 0600 if it does not exist, so that SQLite, which creates a
/// database with the umask's mode (0644 usually), opens ours instead; its -wal and -shm files
/// take the database's mode.
pub fn create_private(path: &Path) -> Result<(), DataDirError> {
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io(path)(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_fresh_directory_is_private() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/data");
        prepare(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        let db = dir.join("livepack.db");
        create_private(&db).unwrap();
        assert_eq!(mode(&db), 0o600);
        // An existing file is left as it is (its contents too).
        std::fs::write(&db, "x").unwrap();
        create_private(&db).unwrap();
        assert_eq!(std::fs::read_to_string(&db).unwrap(), "x");
    }

    #[test]
    fn open_directories_and_files_are_tightened() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, Permissions::from_mode(0o755)).unwrap();
        let db = dir.join("livepack.db");
        std::fs::write(&db, "").unwrap();
        std::fs::set_permissions(&db, Permissions::from_mode(0o644)).unwrap();
        let own = dir.join("api_key");
        std::fs::write(&own, "").unwrap();
        std::fs::set_permissions(&own, Permissions::from_mode(0o400)).unwrap();
        std::fs::create_dir(dir.join("media")).unwrap();
        std::fs::set_permissions(dir.join("media"), Permissions::from_mode(0o755)).unwrap();
        prepare(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&db), 0o600);
        // Nothing is widened, and what is inside the private directory is left alone.
        assert_eq!(mode(&own), 0o400);
        assert_eq!(mode(&dir.join("media")), 0o755);
    }
}

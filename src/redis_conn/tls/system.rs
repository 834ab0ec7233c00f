//! The platform's CA certificates as PEM text, found where
//! rustls-native-certs looks (`SSL_CERT_FILE` and `SSL_CERT_DIR`, else the
//! file and directories openssl-probe finds), but not decoded here: the
//! redis crate takes PEM and decodes it itself, and decoding the ~300 KB
//! twice, as going through rustls-native-certs's DER would, costs a run
//! milliseconds. A certificate in both the bundle and the directory (the
//! usual layout: `/etc/ssl/certs` holds both) is kept once, compared as text.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
const END: &str = "-----END CERTIFICATE-----";

/// Every CA certificate the platform trusts, each once, as PEM.
pub(super) fn pem() -> Result<Vec<u8>, String> {
    let (file, dirs) = paths();
    let mut found = Found::default();
    if let Some(file) = &file {
        if let Ok(metadata) = fs::metadata(file) {
            found.seen.insert((metadata.dev(), metadata.ino()));
        }
        found.read(file)?;
    }
    for dir in &dirs {
        let entries = fs::read_dir(dir).map_err(|err| at(dir, &err))?;
        for entry in entries {
            let path = entry.map_err(|err| at(dir, &err))?.path();
            let metadata = match fs::metadata(&path) {
                Ok(metadata) => metadata,
                // A dangling link, as rustls-native-certs skips it.
                Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
                Err(err) => return Err(at(&path, &err)),
            };
            if metadata.is_file() && found.seen.insert((metadata.dev(), metadata.ino())) {
                found.read(&path)?;
            }
        }
    }
    Ok(found.pem.into_bytes())
}

/// Where to look: the environment's, if it names any, else the platform's.
fn paths() -> (Option<PathBuf>, Vec<PathBuf>) {
    let file = std::env::var_os("SSL_CERT_FILE").map(PathBuf::from);
    let dirs: Vec<PathBuf> = std::env::var_os("SSL_CERT_DIR")
        .map(|dirs| {
            std::env::split_paths(&dirs)
                .filter(|dir| !dir.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default();
    if file.is_some() || !dirs.is_empty() {
        return (file, dirs);
    }
    let probed = openssl_probe::probe();
    (probed.cert_file, probed.cert_dir)
}

fn at(path: &Path, err: &io::Error) -> String {
    format!("{}: {err}", path.display())
}

/// The certificates read so far.
#[derive(Default)]
struct Found {
    pem: String,
    blocks: HashSet<String>,
    /// Files already read, by device and inode: the directory's hash links
    /// and the bundle name files read before.
    seen: HashSet<(u64, u64)>,
}

impl Found {
    fn read(&mut self, path: &Path) -> Result<(), String> {
        let bytes = fs::read(path).map_err(|err| at(path, &err))?;
        // Not text: not a PEM file, and rustls-native-certs would find no
        // certificate in it either.
        let Ok(text) = std::str::from_utf8(&bytes) else {
            return Ok(());
        };
        for block in blocks(text) {
            if self.blocks.insert(block.clone()) {
                self.pem.push_str(&block);
            }
        }
        Ok(())
    }
}

/// Each certificate of `text`, its lines trimmed, ending in a newline.
fn blocks(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(BEGIN) {
        let Some(len) = rest[start..].find(END) else {
            break;
        };
        let block = &rest[start..start + len + END.len()];
        let mut normal = String::with_capacity(block.len() + 1);
        for line in block.lines().map(str::trim).filter(|line| !line.is_empty()) {
            normal.push_str(line);
            normal.push('\n');
        }
        found.push(normal);
        rest = &rest[start + len + END.len()..];
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_found_and_normalised() {
        let text = "junk\n-----BEGIN CERTIFICATE-----\r\nAAAA\r\n-----END CERTIFICATE-----\n\
                    -----BEGIN CERTIFICATE-----\n  BBBB\n-----END CERTIFICATE-----\n\
                    -----BEGIN CERTIFICATE-----\nCCCC";
        assert_eq!(
            blocks(text),
            [
                "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
                "-----BEGIN CERTIFICATE-----\nBBBB\n-----END CERTIFICATE-----\n",
            ]
        );
    }
}

//! The platform's CA certificates as PEM text, found where
//! rustls-native-certs looks (`SSL_CERT_FILE` and `SSL_CERT_DIR`, else the
//! file and directories openssl-probe finds), but not decoded here: the
//! redis crate takes PEM and decodes it itself, and decoding the ~300 KB
//! twice, as going through rustls-native-certs's DER would, costs a run
//! milliseconds. A certificate in both the bundle and the directory (the
//! usual layout: `/etc/ssl/certs` holds both) is kept once, compared as
//! text (the bundle is made by concatenating the directory's files).

use std::collections::HashSet;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

const BEGIN: &[u8] = b"-----BEGIN CERTIFICATE-----";
const END: &[u8] = b"-----END CERTIFICATE-----";

/// Every CA certificate the platform trusts, each once, as PEM.
pub(super) fn pem() -> Result<Vec<u8>, String> {
    let (file, dirs) = paths();
    let mut seen = HashSet::new();
    let mut files = Vec::new();
    if let Some(file) = &file {
        if let Ok(metadata) = fs::metadata(file) {
            seen.insert((metadata.dev(), metadata.ino()));
        }
        files.push(fs::read(file).map_err(|err| at(file, &err))?);
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
            // Each file once: a directory's hash links name the files
            // beside them, and may name the bundle read before.
            if metadata.is_file() && seen.insert((metadata.dev(), metadata.ino())) {
                files.push(fs::read(&path).map_err(|err| at(&path, &err))?);
            }
        }
    }
    // One file (SSL_CERT_FILE, or a bundle alone): as it was read.
    if files.len() == 1 {
        return Ok(files.remove(0));
    }
    let mut kept = HashSet::new();
    let mut pem = Vec::new();
    for block in files.iter().flat_map(|file| blocks(file)) {
        if kept.insert(block) {
            pem.extend_from_slice(block);
            pem.push(b'\n');
        }
    }
    Ok(pem)
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

/// Each certificate in `file`, from its BEGIN line to its END line.
fn blocks(file: &[u8]) -> Vec<&[u8]> {
    let mut found = Vec::new();
    let mut rest = file;
    while let Some(start) = find(rest, BEGIN) {
        let Some(len) = find(&rest[start..], END) else {
            break;
        };
        let end = start + len + END.len();
        found.push(&rest[start..end]);
        rest = &rest[end..];
    }
    found
}

/// Where `needle` starts in `haystack`: the first byte is looked for with
/// `memchr`-like speed (`position` on bytes), then the rest compared.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = haystack[from..].iter().position(|&b| b == needle[0]) {
        let start = from + at;
        if haystack[start..].starts_with(needle) {
            return Some(start);
        }
        from = start + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_found_whole() {
        let text = b"junk\n-----BEGIN CERTIFICATE-----\r\nAAAA\r\n-----END CERTIFICATE-----\n\
                     -----BEGIN CERTIFICATE-----\nBBBB\n-----END CERTIFICATE-----\n\
                     -----BEGIN CERTIFICATE-----\nCCCC";
        assert_eq!(
            blocks(text),
            [
                &b"-----BEGIN CERTIFICATE-----\r\nAAAA\r\n-----END CERTIFICATE-----"[..],
                &b"-----BEGIN CERTIFICATE-----\nBBBB\n-----END CERTIFICATE-----"[..],
            ]
        );
    }
}

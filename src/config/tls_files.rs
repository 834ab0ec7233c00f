//! The files of TLS to Redis (`--redis-ca-file`, `--redis-cert-file`,
//! `--redis-key-file`), read and checked once, before anything is locked:
//! a file that cannot be used is a usage error naming its flag.
//!
//! Any of them with no TLS URL is refused: it would most likely be a
//! `redis://` meant as `rediss://`, which sends the password in the clear.
//! A certificate without its key, or a key without its certificate, is
//! refused too: which one was forgotten cannot be guessed. A key file that
//! others than its owner may read is used, with one warning line: unlike a
//! password file's, its mode is often set by the tool that issued it, and a
//! run that stops working when a certificate is renewed helps nobody.

use std::fmt;
use std::path::{Path, PathBuf};

use super::RedisSettings;
use crate::error::Error;
use crate::redis_conn::{Ca, Identity, IdentityError, Target, Tls};
use crate::secret_file;

/// A PEM file longer than this is something else given by mistake.
const MAX_PEM_FILE: u64 = 1 << 20;

/// `--redis-key-file`, readable by users other than its owner.
#[derive(Debug, Clone)]
pub(crate) struct ExposedKey {
    pub(crate) path: PathBuf,
    pub(crate) mode: u32,
}

/// The TLS setup the flags ask for, if `tls` (some URL is `rediss…://`);
/// and the key file, if others may read it.
pub(super) fn read(
    redis: &RedisSettings,
    tls: bool,
) -> Result<(Option<Tls>, Option<ExposedKey>), Error> {
    let identity =
        match (&redis.cert_file, &redis.key_file) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            (Some(_), None) => return Err(Error::Usage(
                "--redis-cert-file needs --redis-key-file (or LOCKRUN_REDIS_KEY_FILE): a client \
                 certificate is shown with its private key"
                    .into(),
            )),
            (None, Some(_)) => return Err(Error::Usage(
                "--redis-key-file needs --redis-cert-file (or LOCKRUN_REDIS_CERT_FILE): the key \
                 is of a client certificate"
                    .into(),
            )),
        };
    if !tls {
        let given = [
            ("--redis-ca-file", redis.ca_file.as_ref()),
            ("--redis-cert-file", redis.cert_file.as_ref()),
        ];
        if let Some((flag, Some(path))) = given.into_iter().find(|(_, path)| path.is_some()) {
            return Err(refused(
                &redis.named(flag),
                path,
                "it is for TLS, but --redis names no rediss:// URL (nor rediss+sentinel://, \
                 rediss+cluster://)",
            ));
        }
        return Ok((None, None));
    }
    let ca = match &redis.ca_file {
        Some(path) => {
            let flag = redis.named("--redis-ca-file");
            let (pem, _) = read_pem(path).map_err(|why| refused(&flag, path, why))?;
            Some(Ca::from_pem(pem).map_err(|why| refused(&flag, path, why))?)
        }
        None => None,
    };
    let (identity, exposed) = match identity {
        Some((cert, key)) => {
            let (identity, exposed) = read_identity(redis, cert, key)?;
            (Some(identity), exposed)
        }
        None => (None, None),
    };
    let tls = Tls::new(ca, identity).map_err(Error::Usage)?;
    Ok((Some(tls), exposed))
}

/// The certificate and key, and the key file if others may read it.
fn read_identity(
    redis: &RedisSettings,
    cert: &Path,
    key: &Path,
) -> Result<(Identity, Option<ExposedKey>), Error> {
    let (cert_flag, key_flag) = (
        redis.named("--redis-cert-file"),
        redis.named("--redis-key-file"),
    );
    let (cert_pem, _) = read_pem(cert).map_err(|why| refused(&cert_flag, cert, why))?;
    let (key_pem, mode) = read_pem(key).map_err(|why| refused(&key_flag, key, why))?;
    let identity = Identity::from_pem(cert_pem, key_pem).map_err(|err| match err {
        IdentityError::Cert(why) => refused(&cert_flag, cert, why),
        IdentityError::Key(why) => refused(&key_flag, key, why),
    })?;
    let exposed = (mode & 0o077 != 0).then(|| ExposedKey {
        path: key.to_owned(),
        mode: mode & 0o7777,
    });
    Ok((identity, exposed))
}

/// `targets`, each using `tls` on the servers it reaches over TLS.
pub(super) fn using(targets: Vec<Target>, tls: &Tls) -> Result<Vec<Target>, Error> {
    targets
        .into_iter()
        .map(|target| {
            target
                .with_tls(tls)
                .map_err(|err| Error::Usage(format!("TLS to Redis cannot be set up: {err}")))
        })
        .collect()
}

fn refused(flag: &str, path: &Path, why: impl fmt::Display) -> Error {
    Error::Usage(format!("{flag} {}: {why}", path.display()))
}

/// The contents of the file at `path` and its mode, read from the opened
/// file so that both are of the same file.
fn read_pem(path: &Path) -> Result<(Vec<u8>, u32), String> {
    let (pem, mode) = secret_file::read_at_most(path, MAX_PEM_FILE)?;
    if pem.len() as u64 > MAX_PEM_FILE {
        return Err(format!(
            "it is over {} MiB: not a PEM file",
            MAX_PEM_FILE >> 20
        ));
    }
    Ok((pem, mode))
}

//! The CA directory: the CA (`ca.pem`, `ca.key`), the certificates it issued (`NAME.pem`, `NAME.key`),
//! a record of every certificate it issued (`issued.toml`: serial, role, name, validity, revocation)
//! and its certificate revocation list (`ca.crl.pem`, signed by the CA, its number one higher at each
//! change). `tessera ca` and `tessera up` work through [`CaDir`]; nodes only read the CA certificate
//! and the revocation list ([`tessera_proto::crl`]).
//!
//! Renewal makes a new key as well as a new certificate (a key that may have leaked does not live on
//! in the renewed certificate); the certificate it replaces stays valid until it expires unless it is
//! revoked (`tessera ca revoke NAME --serial OLD`).

use crate::issue::{self, gen, CaPem, Issued};
use rcgen::{CertificateRevocationListParams, KeyIdMethod, RevokedCertParams, SerialNumber};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use tessera_proto::tls::{self, CertInfo, TlsError, TlsFiles, Validity, CRL_FILE};
use tessera_proto::types::Role;

/// The record of issued certificates in a CA directory.
pub const INDEX_FILE: &str = "issued.toml";
/// Days a revocation list says the next one is due (nodes do not enforce it: a list stays in force
/// until a newer one replaces it).
const CRL_NEXT_UPDATE_DAYS: i64 = 365;

fn file_err(path: &Path, e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> TlsError {
    TlsError::file(path, e)
}

/// The CA's certificate or key could not be read ([`CaDir::open`]).
#[derive(Debug, thiserror::Error)]
#[error("reading the CA")]
struct ReadingCa(#[source] std::io::Error);

/// Writes a new CA into `dir`: `ca.pem`, `ca.key` (readable by the owner only), an empty record of
/// issued certificates and an empty revocation list.
pub fn write_ca(dir: &Path, ca: &CaPem) -> Result<(), TlsError> {
    std::fs::create_dir_all(dir).map_err(|e| file_err(dir, e))?;
    write_atomic(&dir.join("ca.pem"), ca.cert.as_bytes(), false)?;
    write_atomic(&dir.join("ca.key"), ca.key.as_bytes(), true)?;
    let mut ca_dir = CaDir::open(dir)?;
    ca_dir.index = Index::default();
    ca_dir.write_crl()
}

pub fn read_ca(dir: &Path) -> std::io::Result<CaPem> {
    Ok(CaPem { cert: std::fs::read_to_string(dir.join("ca.pem"))?, key: std::fs::read_to_string(dir.join("ca.key"))? })
}

/// Issues `<dir>/<name>.pem` + `<name>.key`, valid for [`issue::NODE_DAYS`], records it in the CA
/// directory `dir` and returns the paths as [`TlsFiles`].
pub fn issue_to_dir(dir: &Path, ca: &CaPem, role: Role, name: &str, sans: &[String]) -> Result<TlsFiles, TlsError> {
    let issued = issue::issue(ca, role, name, sans, Validity::days(issue::NODE_DAYS))?;
    let files = write_issued(dir, name, &issued)?;
    let mut ca_dir = CaDir::open_with(dir, ca)?;
    ca_dir.record(&issued.info);
    ca_dir.save()?;
    Ok(files)
}

fn write_issued(dir: &Path, name: &str, issued: &Issued) -> Result<TlsFiles, TlsError> {
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return Err(TlsError::Config(format!("'{name}' cannot name a certificate file")));
    }
    let files = TlsFiles::in_dir(dir, name);
    // The key first: a node starting in between gets the old certificate with the new key and fails
    // clearly (key mismatch) rather than quietly using a certificate about to be replaced.
    write_atomic(&files.key, issued.key.as_bytes(), true)?;
    write_atomic(&files.cert, issued.cert.as_bytes(), false)?;
    Ok(files)
}

/// Replaces `path` by `content` at once (a reader sees the old file or the new one).
fn write_atomic(path: &Path, content: &[u8], private: bool) -> Result<(), TlsError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(if private { 0o600 } else { 0o644 })
            .open(&tmp)?;
        f.write_all(content)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| file_err(path, e))
}

/// One certificate the CA issued.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Serial number, hex.
    pub serial: String,
    pub role: String,
    pub name: String,
    /// Validity, seconds since the Unix epoch.
    pub not_before: i64,
    pub not_after: i64,
    /// When it was revoked (seconds since the Unix epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<i64>,
}

/// What a certificate is worth at some time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CertState {
    Valid,
    NotYetValid,
    Expired,
    /// Revoked at that time (seconds since the Unix epoch).
    Revoked(i64),
}

impl std::fmt::Display for CertState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CertState::Valid => write!(f, "valid"),
            CertState::NotYetValid => write!(f, "not yet valid"),
            CertState::Expired => write!(f, "expired"),
            CertState::Revoked(at) => write!(f, "revoked {}", tessera_proto::types::format_utc(*at)),
        }
    }
}

impl Record {
    pub fn state(&self, now: i64) -> CertState {
        match self.revoked_at {
            Some(at) => CertState::Revoked(at),
            None if now > self.not_after => CertState::Expired,
            None if now < self.not_before => CertState::NotYetValid,
            None => CertState::Valid,
        }
    }
}

/// The content of [`INDEX_FILE`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Index {
    /// Number of the last revocation list written.
    #[serde(default)]
    pub crl_number: u64,
    #[serde(default)]
    pub cert: Vec<Record>,
}

/// A CA directory opened for changes. It holds an exclusive lock on the directory (`.lock`) until
/// dropped, so two `tessera ca` commands do not lose each other's records.
pub struct CaDir {
    pub dir: PathBuf,
    pub ca: CaPem,
    pub index: Index,
    _lock: std::fs::File,
}

impl CaDir {
    /// Opens the CA in `dir`. Certificates found there that the record does not know (issued before
    /// it existed) are added to it.
    pub fn open(dir: &Path) -> Result<CaDir, TlsError> {
        let ca = read_ca(dir).map_err(|e| file_err(dir, ReadingCa(e)))?;
        CaDir::open_with(dir, &ca)
    }

    fn open_with(dir: &Path, ca: &CaPem) -> Result<CaDir, TlsError> {
        let lock = lock_dir(dir)?;
        let path = dir.join(INDEX_FILE);
        let index = match std::fs::read_to_string(&path) {
            Ok(text) => toml::from_str(&text).map_err(|e| file_err(&path, e))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Index::default(),
            Err(e) => return Err(file_err(&path, e)),
        };
        let mut ca_dir = CaDir {
            dir: dir.to_path_buf(),
            ca: CaPem { cert: ca.cert.clone(), key: ca.key.clone() },
            index,
            _lock: lock,
        };
        ca_dir.adopt_unrecorded()?;
        Ok(ca_dir)
    }

    fn adopt_unrecorded(&mut self) -> Result<(), TlsError> {
        let ca_der = CertificateDer::from_pem_slice(self.ca.cert.as_bytes())
            .map_err(|e| file_err(&self.dir.join("ca.pem"), e))?;
        let entries = std::fs::read_dir(&self.dir).map_err(|e| file_err(&self.dir, e))?;
        let mut names: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "pem"))
            .filter(|p| p.file_name().is_some_and(|n| n != "ca.pem" && n != CRL_FILE))
            .collect();
        names.sort();
        for path in names {
            let Ok(pem) = std::fs::read(&path) else { continue };
            let Ok(der) = CertificateDer::from_pem_slice(&pem) else { continue };
            let Some(info) = CertInfo::parse(&der) else { continue };
            // The record first: checking the signature builds a verifier.
            let known = self.index.cert.iter().any(|r| r.serial == info.serial);
            if !known && tls::issued_by(&der, &ca_der) {
                self.record(&info);
            }
        }
        Ok(())
    }

    /// Adds an issued certificate to the record, once (in memory; [`CaDir::save`] writes it).
    pub fn record(&mut self, info: &CertInfo) {
        if self.index.cert.iter().any(|r| r.serial == info.serial) {
            return;
        }
        self.index.cert.push(Record {
            serial: info.serial.clone(),
            role: info.role.as_str().to_string(),
            name: info.name.clone(),
            not_before: info.validity.not_before,
            not_after: info.validity.not_after,
            revoked_at: None,
        });
    }

    pub fn save(&self) -> Result<(), TlsError> {
        let text = toml::to_string(&self.index).map_err(|e| file_err(&self.dir.join(INDEX_FILE), e))?;
        let text = format!(
            "# Certificates issued by this CA: tessera ca issue, renew and revoke keep this file.\n\
             # Times are seconds since the Unix epoch; `tessera ca list` shows them.\n\n{text}"
        );
        write_atomic(&self.dir.join(INDEX_FILE), text.as_bytes(), false)
    }

    /// Issues `name` (refusing to replace an existing certificate file unless `force`), records it.
    pub fn issue(
        &mut self,
        role: Role,
        name: &str,
        sans: &[String],
        validity: Validity,
        force: bool,
    ) -> Result<(TlsFiles, CertInfo), TlsError> {
        let cert = TlsFiles::in_dir(&self.dir, name).cert;
        if cert.exists() && !force {
            return Err(file_err(&cert, "exists (use --force to replace it)"));
        }
        let issued = issue::issue(&self.ca, role, name, sans, validity)?;
        let files = write_issued(&self.dir, name, &issued)?;
        self.record(&issued.info);
        self.save()?;
        Ok((files, issued.info))
    }

    /// A new certificate and key for `name` with the role and names of its current certificate
    /// (`NAME.pem`), valid for `validity`, in the same files. Returns the old certificate and the new.
    pub fn renew(&mut self, name: &str, validity: Validity) -> Result<(CertInfo, CertInfo), TlsError> {
        let path = TlsFiles::in_dir(&self.dir, name).cert;
        let pem = std::fs::read_to_string(&path).map_err(|e| file_err(&path, e))?;
        let old = CertInfo::from_pem(&pem).ok_or_else(|| file_err(&path, "not a Tessera certificate"))?;
        let (_, new) = self.issue(old.role, name, &old.sans, validity, true)?;
        Ok((old, new))
    }

    /// Revokes the certificates issued to `name` (only the one with `serial`, if given) and writes a
    /// new revocation list. Returns those newly revoked; revoking again only rewrites the list.
    pub fn revoke(&mut self, name: &str, serial: Option<&str>) -> Result<Vec<Record>, TlsError> {
        let serial = serial.map(|s| s.trim_start_matches("0x").to_ascii_lowercase());
        let matching: Vec<usize> = (0..self.index.cert.len())
            .filter(|&i| self.index.cert[i].name == name)
            .filter(|&i| serial.as_ref().is_none_or(|s| &self.index.cert[i].serial == s))
            .collect();
        if matching.is_empty() {
            let what = match &serial {
                Some(s) => format!("no certificate with serial {s} was issued to '{name}'"),
                None => format!("no certificate was issued to '{name}'"),
            };
            return Err(file_err(&self.dir.join(INDEX_FILE), what));
        }
        let now = tls::unix_now();
        let mut revoked = Vec::new();
        for i in matching {
            let r = &mut self.index.cert[i];
            if r.revoked_at.is_none() {
                r.revoked_at = Some(now);
                revoked.push(r.clone());
            }
        }
        self.write_crl()?;
        Ok(revoked)
    }

    /// Writes the revocation list of every revoked certificate, numbered one higher than the last,
    /// and saves the record.
    pub fn write_crl(&mut self) -> Result<(), TlsError> {
        let (ca_cert, ca_key) = issue::ca_signer(&self.ca)?;
        let at = |t: i64| {
            time::OffsetDateTime::from_unix_timestamp(t).map_err(|e| TlsError::Config(format!("time {t}: {e}")))
        };
        let now = tls::unix_now();
        let mut revoked_certs = Vec::new();
        for r in self.index.cert.iter() {
            let Some(when) = r.revoked_at else { continue };
            let serial = unhex(&r.serial).ok_or_else(|| TlsError::Config(format!("bad serial '{}'", r.serial)))?;
            revoked_certs.push(RevokedCertParams {
                serial_number: SerialNumber::from_slice(&serial),
                revocation_time: at(when)?,
                reason_code: None,
                invalidity_date: None,
            });
        }
        self.index.crl_number += 1;
        let params = CertificateRevocationListParams {
            this_update: at(now)?,
            next_update: at(now + CRL_NEXT_UPDATE_DAYS * 86_400)?,
            crl_number: SerialNumber::from(self.index.crl_number),
            issuing_distribution_point: None,
            revoked_certs,
            key_identifier_method: KeyIdMethod::Sha256,
        };
        let crl = params.signed_by(&ca_cert, &ca_key).map_err(gen)?;
        // The record first: should writing the list fail, the next revoke writes a higher number.
        self.save()?;
        write_atomic(&self.crl_path(), crl.pem().map_err(gen)?.as_bytes(), false)
    }

    pub fn crl_path(&self) -> PathBuf {
        self.dir.join(CRL_FILE)
    }

    /// The certificate currently in `NAME.pem` for each name (others were replaced by a renewal).
    pub fn is_current(&self, r: &Record) -> bool {
        let path = TlsFiles::in_dir(&self.dir, &r.name).cert;
        std::fs::read_to_string(path).ok().and_then(|p| CertInfo::from_pem(&p)).is_some_and(|c| c.serial == r.serial)
    }
}

/// An exclusive `flock` on `dir/.lock`, released when the file is closed.
fn lock_dir(dir: &Path) -> Result<std::fs::File, TlsError> {
    use std::os::fd::AsRawFd;
    let path = dir.join(".lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| file_err(&path, e))?;
    // SAFETY: a valid descriptor; flock has no other preconditions.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(file_err(&path, std::io::Error::last_os_error()));
    }
    Ok(f)
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.is_empty() {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_revoke_renew_keep_the_record() {
        let dir = tempfile::tempdir().unwrap();
        write_ca(dir.path(), &issue::generate_ca("t").unwrap()).unwrap();
        let mut ca = CaDir::open(dir.path()).unwrap();
        assert_eq!(ca.index.crl_number, 1, "init writes an empty list");
        let (_, c1) = ca.issue(Role::Client, "c1", &[], Validity::days(10), false).unwrap();
        assert!(ca.issue(Role::Client, "c1", &[], Validity::days(10), false).is_err(), "no silent overwrite");
        ca.issue(Role::Ds, "ds0", &["10.0.0.5".into()], Validity::days(10), false).unwrap();
        drop(ca);

        let mut ca = CaDir::open(dir.path()).unwrap();
        assert_eq!(ca.index.cert.len(), 2);
        let (old, new) = ca.renew("ds0", Validity::days(20)).unwrap();
        assert_ne!(old.serial, new.serial);
        assert_eq!((new.role, new.sans.contains(&"10.0.0.5".to_string())), (Role::Ds, true));
        assert!(new.validity.not_after > old.validity.not_after);
        let revoked = ca.revoke("c1", None).unwrap();
        assert_eq!(revoked.len(), 1);
        assert_eq!(revoked[0].serial, c1.serial);
        assert!(ca.revoke("c1", None).unwrap().is_empty(), "already revoked");
        assert!(ca.revoke("nobody", None).is_err());
        assert!(ca.revoke("ds0", Some("00")).is_err());
        ca.revoke("ds0", Some(&old.serial.to_uppercase())).unwrap();
        let now = tls::unix_now();
        let states: Vec<(String, bool, bool)> = ca
            .index
            .cert
            .iter()
            .map(|r| (r.name.clone(), matches!(r.state(now), CertState::Revoked(_)), ca.is_current(r)))
            .collect();
        assert_eq!(
            states,
            [("c1".into(), true, true), ("ds0".into(), true, false), ("ds0".into(), false, true)],
            "{states:?}"
        );
        assert_eq!(ca.index.crl_number, 4);
        drop(ca);

        let crl = std::fs::read(dir.path().join(CRL_FILE)).unwrap();
        let der = rustls::pki_types::CertificateRevocationListDer::from_pem_slice(&crl).unwrap();
        let (_, parsed) = x509_parser::parse_x509_crl(&der).unwrap();
        assert_eq!(parsed.crl_number().map(|n| n.to_string()), Some("4".into()));
        let serials: Vec<String> = parsed.iter_revoked_certificates().map(|r| tls::hex(r.raw_serial())).collect();
        assert_eq!(serials, [c1.serial.clone(), old.serial.clone()]);
    }

    #[test]
    fn certificates_issued_before_the_record_are_adopted() {
        let dir = tempfile::tempdir().unwrap();
        let ca = issue::generate_ca("t").unwrap();
        write_ca(dir.path(), &ca).unwrap();
        let issued = issue::issue(&ca, Role::Mds, "mds", &[], Validity::days(1)).unwrap();
        write_issued(dir.path(), "mds", &issued).unwrap();
        let foreign =
            issue::issue(&issue::generate_ca("x").unwrap(), Role::Ds, "evil", &[], Validity::days(1)).unwrap();
        write_issued(dir.path(), "evil", &foreign).unwrap();
        let ca_dir = CaDir::open(dir.path()).unwrap();
        let names: Vec<&str> = ca_dir.index.cert.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["mds"], "only certificates of this CA");
        assert_eq!(ca_dir.index.cert[0].serial, issued.info.serial);
        drop(ca_dir);
        // issue_to_dir writes the files before it opens the record: recorded once, not adopted again.
        issue_to_dir(dir.path(), &ca, Role::Client, "c", &[]).unwrap();
        let mut names: Vec<String> = CaDir::open(dir.path()).unwrap().index.cert.into_iter().map(|r| r.name).collect();
        names.sort();
        assert_eq!(names, ["c", "mds"]);
    }

    #[test]
    fn serials_round_trip_through_hex() {
        assert_eq!(unhex("40ff00").unwrap(), [0x40, 0xff, 0]);
        assert!(unhex("4").is_none() && unhex("zz").is_none() && unhex("").is_none());
        assert_eq!(tls::hex(&[0x40, 0xff, 0]), "40ff00");
    }
}

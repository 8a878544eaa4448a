//! What a Tessera certificate says ([`CertInfo`]: role, name, serial, validity, names), the files of a
//! node's TLS material ([`TlsFiles`]), the TLS error type and the crypto provider: what both the node
//! identity ([`crate::tls`]) and the revocation checks ([`super::crl`]) use.

use crate::types::Role;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why TLS material could not be read, made or used. The underlying error is the source (print the
/// chain: `tessera_proto::error::chain`, or anyhow's `{:#}`).
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file (or directory) of TLS material: unreadable, malformed, or not what it must be.
    #[error("{}", path.display())]
    File {
        path: PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Making a key, a certificate or a revocation list failed (`tessera-ops` issues them).
    #[error("certificate generation")]
    Gen(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A setting that cannot be used, said in words (no underlying error).
    #[error("tls configuration: {0}")]
    Config(String),
    /// rustls refused the configuration (a key that does not fit the certificate, a CA certificate it
    /// cannot use, ...).
    #[error("tls configuration{}", if what.is_empty() { String::new() } else { format!(": {what}") })]
    Rustls {
        what: &'static str,
        #[source]
        source: rustls::Error,
    },
    /// A certificate verifier could not be built.
    #[error("tls configuration: certificate verifier")]
    Verifier(#[source] rustls::server::VerifierBuilderError),
}

impl TlsError {
    /// A file error: `path`, and what was wrong with it (an error, or words).
    pub fn file(path: &Path, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> TlsError {
        TlsError::File { path: path.to_path_buf(), source: source.into() }
    }
}

/// A certificate's validity period, in seconds since the Unix epoch (both ends included).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity {
    pub not_before: i64,
    pub not_after: i64,
}

/// A new certificate is valid from this many seconds before it is made, so a peer whose clock is a
/// little behind does not refuse it as not yet valid.
pub const BACKDATE_S: i64 = 300;

impl Validity {
    /// From a few minutes ago ([`BACKDATE_S`]) until `days` days from now.
    pub fn days(days: u32) -> Validity {
        let now = crate::tls::unix_now();
        Validity { not_before: now - BACKDATE_S, not_after: now + i64::from(days) * 86_400 }
    }
}

/// What a Tessera certificate says: role and name, serial, validity, subject alternative names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertInfo {
    pub role: Role,
    pub name: String,
    /// The serial number's bytes (as in the certificate and a revocation list), in hex.
    pub serial: String,
    pub validity: Validity,
    /// DNS names and IP addresses.
    pub sans: Vec<String>,
}

impl CertInfo {
    /// Parses a DER certificate; `None` if it is not one or carries no Tessera role.
    pub fn parse(der: &[u8]) -> Option<CertInfo> {
        use x509_parser::extensions::GeneralName;
        let (_, parsed) = x509_parser::parse_x509_certificate(der).ok()?;
        let subject = parsed.subject();
        let role = subject.iter_organizational_unit().next()?.as_str().ok().and_then(Role::parse)?;
        let name = subject.iter_common_name().next().and_then(|cn| cn.as_str().ok()).unwrap_or("").to_string();
        let v = parsed.validity();
        let mut sans = Vec::new();
        if let Ok(Some(ext)) = parsed.subject_alternative_name() {
            for n in &ext.value.general_names {
                match n {
                    GeneralName::DNSName(d) => sans.push(d.to_string()),
                    GeneralName::IPAddress(b) => match <[u8; 4]>::try_from(*b) {
                        Ok(v4) => sans.push(std::net::Ipv4Addr::from(v4).to_string()),
                        Err(_) => {
                            if let Ok(v6) = <[u8; 16]>::try_from(*b) {
                                sans.push(std::net::Ipv6Addr::from(v6).to_string())
                            }
                        }
                    },
                    _ => {}
                }
            }
        }
        Some(CertInfo {
            role,
            name,
            serial: hex(parsed.raw_serial()),
            validity: Validity { not_before: v.not_before.timestamp(), not_after: v.not_after.timestamp() },
            sans,
        })
    }

    /// The first certificate of a PEM text.
    pub fn from_pem(pem: &str) -> Option<CertInfo> {
        let der = CertificateDer::from_pem_slice(pem.as_bytes()).ok()?;
        CertInfo::parse(&der)
    }

    /// `ds 'ds1' (serial 4a2f...)`, for log lines and messages.
    pub fn who(&self) -> String {
        format!("{} '{}' (certificate serial {})", self.role, self.name, self.serial)
    }
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Paths of a node's TLS material.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The CA's certificate revocation list (PEM); default [`CRL_FILE`] next to the CA certificate. A
    /// missing file means nothing is revoked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crl: Option<PathBuf>,
}

/// Name of the revocation list in a CA directory, and next to a node's CA certificate by default.
pub const CRL_FILE: &str = "ca.crl.pem";

impl TlsFiles {
    /// The files of node `name` in CA directory `dir` (`ca.pem`, `NAME.pem`, `NAME.key`).
    pub fn in_dir(dir: &Path, name: &str) -> TlsFiles {
        TlsFiles {
            ca: dir.join("ca.pem"),
            cert: dir.join(format!("{name}.pem")),
            key: dir.join(format!("{name}.key")),
            crl: None,
        }
    }

    /// Where the revocation list is read from.
    pub fn crl_path(&self) -> PathBuf {
        match &self.crl {
            Some(p) => p.clone(),
            None => self.ca.with_file_name(CRL_FILE),
        }
    }
}

/// ring's TLS 1.3 suites with AES-128-GCM first: every byte of file data is sealed once and opened once,
/// and AES-128 (10 rounds) costs about a quarter less CPU than AES-256 (14), which rustls prefers by default.
/// The other suites stay, so peers that prefer them still connect.
pub(crate) fn crypto_provider() -> Arc<rustls::crypto::CryptoProvider> {
    let mut p = rustls::crypto::ring::default_provider();
    p.cipher_suites.sort_by_key(|s| s.suite() != rustls::CipherSuite::TLS13_AES_128_GCM_SHA256);
    Arc::new(p)
}

//! A node's TLS identity and the rustls configurations for mutual TLS.
//!
//! A node certificate carries its role in the subject's OU and its name in the CN, and has the SAN
//! `<role>.tessera`: clients connect with that server name, so TLS itself proves the server's role;
//! servers read the client's role from its certificate ([`peer_identity`]). Certificates have a
//! validity period and a random serial; the CA directory that issues them (`tessera_ops::ca`) keeps a
//! record of them and a revocation list, which every node checks in both directions ([`crate::crl`]).
//!
//! What a certificate says and the files of a node's TLS material are in [`cert`], the revocation
//! list and the verifiers that check it in [`crl`] (also `crate::crl`); loading an identity and the
//! rustls configurations are here. Issuing is an operation (`tessera_ops::issue`, with rcgen), tested
//! together with these checks in `ops/tests/tls.rs`.

pub mod cert;
pub mod crl;

pub(crate) use cert::crypto_provider;
pub use cert::{hex, CertInfo, TlsError, TlsFiles, Validity, BACKDATE_S, CRL_FILE};

use crate::types::{format_utc, Role};
use crl::{CrlWatch, RevocationClientVerifier, RevocationServerVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::Path;
use std::sync::Arc;

pub const ALPN: &[u8] = b"tessera/1";

/// Server name a client uses to reach a server of `role`.
pub fn server_name(role: Role) -> String {
    format!("{}.tessera", role.as_str())
}

/// Seconds since the Unix epoch, now.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A node's loaded TLS identity.
#[derive(Clone, Debug)]
pub struct NodeIdentity {
    pub ca: CertificateDer<'static>,
    pub chain: Vec<CertificateDer<'static>>,
    pub key: Arc<PrivateKeyDer<'static>>,
    pub role: Role,
    pub name: String,
    /// The revocation list, reloaded when its file changes; shared by every configuration made from
    /// this identity.
    pub crl: Arc<CrlWatch>,
}

fn file_err(path: &Path, e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> TlsError {
    TlsError::file(path, e)
}

impl NodeIdentity {
    /// Loads the CA, the node's certificate and key, and the revocation list (an unreadable or
    /// malformed one is an error; a missing one means nothing is revoked). Logs a warning when the
    /// node's own certificate has expired, is not valid yet or is revoked.
    pub fn load(files: &TlsFiles) -> Result<NodeIdentity, TlsError> {
        let ca = CertificateDer::from_pem_file(&files.ca).map_err(|e| file_err(&files.ca, e))?;
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
            .map_err(|e| file_err(&files.cert, e))?
            .collect::<Result<_, _>>()
            .map_err(|e| file_err(&files.cert, e))?;
        let first = chain.first().ok_or_else(|| file_err(&files.cert, "no certificate in file"))?;
        let info =
            CertInfo::parse(first).ok_or_else(|| file_err(&files.cert, "certificate carries no Tessera role"))?;
        let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| file_err(&files.key, e))?;
        let crl = Arc::new(CrlWatch::load(files.crl_path(), ca.clone(), first.clone())?);
        let now = unix_now();
        if now > info.validity.not_after {
            tracing::warn!(
                "this node's certificate {} expired at {} UTC: peers will refuse it (tessera ca renew {})",
                files.cert.display(),
                format_utc(info.validity.not_after),
                info.name
            );
        } else if now < info.validity.not_before {
            tracing::warn!(
                "this node's certificate {} is not valid before {} UTC: peers will refuse it until then",
                files.cert.display(),
                format_utc(info.validity.not_before)
            );
        }
        if crl.is_revoked(&info.serial) {
            tracing::warn!("this node's certificate {} is revoked: peers will refuse it", files.cert.display());
        }
        Ok(NodeIdentity { ca, chain, key: Arc::new(key), role: info.role, name: info.name, crl })
    }

    fn roots(&self) -> Result<Arc<rustls::RootCertStore>, TlsError> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca.clone()).map_err(|source| TlsError::Rustls { what: "CA certificate", source })?;
        Ok(Arc::new(roots))
    }

    /// rustls server config requiring a client certificate from the cluster CA that is valid now and
    /// not revoked (the revocation list as it is at each handshake).
    pub fn server_config(&self) -> Result<rustls::ServerConfig, TlsError> {
        let provider = crypto_provider();
        let verifier = RevocationClientVerifier::new(self.roots()?, self.crl.clone())?;
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|source| TlsError::Rustls { what: "", source })?
            .with_client_cert_verifier(Arc::new(verifier))
            .with_single_cert(self.chain.clone(), self.key.clone_key())
            .map_err(|source| TlsError::Rustls { what: "", source })?;
        cfg.alpn_protocols = vec![ALPN.to_vec()];
        // No session resumption: a resumed handshake checks no certificate, so a peer revoked (or
        // expired) since its last full handshake would get in. Connections are long-lived, and a full
        // handshake costs a few signatures.
        cfg.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        cfg.send_tls13_tickets = 0;
        Ok(cfg)
    }

    /// rustls client config presenting this node's certificate and trusting only servers whose
    /// certificate comes from the cluster CA, is valid now and is not revoked.
    pub fn client_config(&self) -> Result<rustls::ClientConfig, TlsError> {
        let provider = crypto_provider();
        let verifier = RevocationServerVerifier::new(self.roots()?, self.crl.clone())?;
        let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|source| TlsError::Rustls { what: "", source })?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_client_auth_cert(self.chain.clone(), self.key.clone_key())
            .map_err(|source| TlsError::Rustls { what: "", source })?;
        cfg.alpn_protocols = vec![ALPN.to_vec()];
        // See server_config: every connection checks the server's certificate.
        cfg.resumption = rustls::client::Resumption::disabled();
        Ok(cfg)
    }
}

/// Role and name (OU and CN) of a Tessera certificate.
pub fn peer_identity(cert: &CertificateDer<'_>) -> Option<(Role, String)> {
    CertInfo::parse(cert).map(|i| (i.role, i.name))
}

/// Whether the CA `ca` signed `cert` (checked as of a time the certificate is valid at).
pub fn issued_by(cert: &CertificateDer<'_>, ca: &CertificateDer<'static>) -> bool {
    let Some(info) = CertInfo::parse(cert) else { return false };
    let mut roots = rustls::RootCertStore::empty();
    if roots.add(ca.clone()).is_err() {
        return false;
    }
    let Ok(v) = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), crypto_provider()).build()
    else {
        return false;
    };
    let at = u64::try_from(info.validity.not_before).unwrap_or(0).saturating_add(1);
    v.verify_client_cert(cert, &[], rustls::pki_types::UnixTime::since_unix_epoch(std::time::Duration::from_secs(at)))
        .is_ok()
}

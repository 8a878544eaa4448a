//! The cluster CA and node certificates (rcgen), and the rustls configurations for mutual TLS.
//!
//! A node certificate carries its role in the subject's OU and its name in the CN, and has the SAN
//! `<role>.tessera`: clients connect with that server name, so TLS itself proves the server's role;
//! servers read the client's role from its certificate ([`peer_identity`]).

use crate::types::Role;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub const ALPN: &[u8] = b"tessera/1";

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {err}")]
    File { path: PathBuf, err: String },
    #[error("certificate generation: {0}")]
    Gen(#[from] rcgen::Error),
    #[error("tls configuration: {0}")]
    Config(String),
}

/// Server name a client uses to reach a server of `role`.
pub fn server_name(role: Role) -> String {
    format!("{}.tessera", role.as_str())
}

/// A freshly generated CA: certificate and key in PEM.
pub struct CaPem {
    pub cert: String,
    pub key: String,
}

pub fn generate_ca(cluster: &str) -> Result<CaPem, TlsError> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, format!("Tessera CA {cluster}"));
    params.distinguished_name = dn;
    let cert = params.self_signed(&key)?;
    Ok(CaPem { cert: cert.pem(), key: key.serialize_pem() })
}

/// Issues a certificate for node `name` with `role`, signed by the CA. `extra_sans` are added to
/// `<role>.tessera` and `localhost` (host names or IP addresses the node is reached at).
pub fn issue(ca: &CaPem, role: Role, name: &str, extra_sans: &[String]) -> Result<(String, String), TlsError> {
    let ca_key = KeyPair::from_pem(&ca.key)?;
    let ca_params = CertificateParams::from_ca_cert_pem(&ca.cert)?;
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let mut sans = vec![server_name(role), "localhost".to_string()];
    sans.extend(extra_sans.iter().cloned());
    let mut params = CertificateParams::new(sans)?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    dn.push(DnType::OrganizationalUnitName, role.as_str());
    dn.push(DnType::OrganizationName, "Tessera");
    params.distinguished_name = dn;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &ca_cert, &ca_key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Paths of a node's TLS material.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A node's loaded TLS identity.
#[derive(Clone, Debug)]
pub struct NodeIdentity {
    pub ca: CertificateDer<'static>,
    pub chain: Vec<CertificateDer<'static>>,
    pub key: Arc<PrivateKeyDer<'static>>,
    pub role: Role,
    pub name: String,
}

fn file_err(path: &Path, e: impl std::fmt::Display) -> TlsError {
    TlsError::File { path: path.to_path_buf(), err: e.to_string() }
}

impl NodeIdentity {
    pub fn load(files: &TlsFiles) -> Result<NodeIdentity, TlsError> {
        let ca = CertificateDer::from_pem_file(&files.ca).map_err(|e| file_err(&files.ca, e))?;
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
            .map_err(|e| file_err(&files.cert, e))?
            .collect::<Result<_, _>>()
            .map_err(|e| file_err(&files.cert, e))?;
        let first = chain.first().ok_or_else(|| file_err(&files.cert, "no certificate in file"))?;
        let (role, name) =
            peer_identity(first).ok_or_else(|| file_err(&files.cert, "certificate carries no Tessera role"))?;
        let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| file_err(&files.key, e))?;
        Ok(NodeIdentity { ca, chain, key: Arc::new(key), role, name })
    }

    fn roots(&self) -> Result<rustls::RootCertStore, TlsError> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca.clone()).map_err(|e| TlsError::Config(format!("CA certificate: {e}")))?;
        Ok(roots)
    }

    /// rustls server config requiring a client certificate from the cluster CA.
    pub fn server_config(&self) -> Result<rustls::ServerConfig, TlsError> {
        let provider = crypto_provider();
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(self.roots()?), provider.clone())
                .build()
                .map_err(|e| TlsError::Config(e.to_string()))?;
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(self.chain.clone(), self.key.clone_key())
            .map_err(|e| TlsError::Config(e.to_string()))?;
        cfg.alpn_protocols = vec![ALPN.to_vec()];
        Ok(cfg)
    }

    /// rustls client config presenting this node's certificate and trusting only the cluster CA.
    pub fn client_config(&self) -> Result<rustls::ClientConfig, TlsError> {
        let provider = crypto_provider();
        let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_root_certificates(self.roots()?)
            .with_client_auth_cert(self.chain.clone(), self.key.clone_key())
            .map_err(|e| TlsError::Config(e.to_string()))?;
        cfg.alpn_protocols = vec![ALPN.to_vec()];
        Ok(cfg)
    }
}

/// ring's TLS 1.3 suites with AES-128-GCM first: every byte of file data is sealed once and opened once,
/// and AES-128 (10 rounds) costs about a quarter less CPU than AES-256 (14), which rustls prefers by default.
/// The other suites stay, so peers that prefer them still connect.
fn crypto_provider() -> Arc<rustls::crypto::CryptoProvider> {
    let mut p = rustls::crypto::ring::default_provider();
    p.cipher_suites.sort_by_key(|s| s.suite() != rustls::CipherSuite::TLS13_AES_128_GCM_SHA256);
    Arc::new(p)
}

/// Role and name (OU and CN) of a Tessera certificate.
pub fn peer_identity(cert: &CertificateDer<'_>) -> Option<(Role, String)> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let subject = parsed.subject();
    let role = subject.iter_organizational_unit().next()?.as_str().ok().and_then(Role::parse)?;
    let name = subject.iter_common_name().next().and_then(|cn| cn.as_str().ok()).unwrap_or("").to_string();
    Some((role, name))
}

/// Writes a CA into `dir` (`ca.pem`, `ca.key`, the key readable by the owner only).
pub fn write_ca(dir: &Path, ca: &CaPem) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("ca.pem"), &ca.cert)?;
    write_private(&dir.join("ca.key"), &ca.key)
}

pub fn read_ca(dir: &Path) -> std::io::Result<CaPem> {
    Ok(CaPem { cert: std::fs::read_to_string(dir.join("ca.pem"))?, key: std::fs::read_to_string(dir.join("ca.key"))? })
}

/// Issues `<dir>/<name>.pem` + `<name>.key` and returns the paths as [`TlsFiles`].
pub fn issue_to_dir(dir: &Path, ca: &CaPem, role: Role, name: &str, sans: &[String]) -> Result<TlsFiles, TlsError> {
    let (cert, key) = issue(ca, role, name, sans)?;
    let files = TlsFiles {
        ca: dir.join("ca.pem"),
        cert: dir.join(format!("{name}.pem")),
        key: dir.join(format!("{name}.key")),
    };
    std::fs::write(&files.cert, cert).map_err(|e| file_err(&files.cert, e))?;
    write_private(&files.key, &key).map_err(|e| file_err(&files.key, e))?;
    Ok(files)
}

fn write_private(path: &Path, content: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().create(true).write(true).truncate(true).mode(0o600).open(path)?;
    f.write_all(content.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_cert_carries_role_and_loads() {
        let dir = tempfile::tempdir().unwrap();
        let ca = generate_ca("t").unwrap();
        write_ca(dir.path(), &ca).unwrap();
        let files = issue_to_dir(dir.path(), &ca, Role::Ds, "ds-3", &["127.0.0.1".into()]).unwrap();
        let id = NodeIdentity::load(&files).unwrap();
        assert_eq!(id.role, Role::Ds);
        assert_eq!(id.name, "ds-3");
        id.server_config().unwrap();
        id.client_config().unwrap();
    }

    /// A full mutual-TLS handshake in memory between two cluster nodes settles on AES-128-GCM.
    #[test]
    fn nodes_negotiate_aes_128_gcm() {
        let dir = tempfile::tempdir().unwrap();
        let ca = generate_ca("t").unwrap();
        write_ca(dir.path(), &ca).unwrap();
        let load = |role, name| {
            NodeIdentity::load(&issue_to_dir(dir.path(), &ca, role, name, &["127.0.0.1".into()]).unwrap()).unwrap()
        };
        let (server_id, client_id) = (load(Role::Ds, "ds0"), load(Role::Client, "c"));
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let mut client =
            rustls::ClientConnection::new(Arc::new(client_id.client_config().unwrap()), name.to_owned()).unwrap();
        let mut server = rustls::ServerConnection::new(Arc::new(server_id.server_config().unwrap())).unwrap();
        for _ in 0..10 {
            let mut buf = Vec::new();
            client.write_tls(&mut buf).unwrap();
            server.read_tls(&mut &buf[..]).unwrap();
            server.process_new_packets().unwrap();
            buf.clear();
            server.write_tls(&mut buf).unwrap();
            client.read_tls(&mut &buf[..]).unwrap();
            client.process_new_packets().unwrap();
        }
        assert!(!client.is_handshaking() && !server.is_handshaking());
        let suite = |s: Option<rustls::SupportedCipherSuite>| s.map(|s| s.suite());
        assert_eq!(suite(client.negotiated_cipher_suite()), Some(rustls::CipherSuite::TLS13_AES_128_GCM_SHA256));
        assert_eq!(suite(server.negotiated_cipher_suite()), Some(rustls::CipherSuite::TLS13_AES_128_GCM_SHA256));
    }
}

//! The cluster CA and node certificates (rcgen), and the rustls configurations for mutual TLS.
//!
//! A node certificate carries its role in the subject's OU and its name in the CN, and has the SAN
//! `<role>.tessera`: clients connect with that server name, so TLS itself proves the server's role;
//! servers read the client's role from its certificate ([`peer_identity`]). Certificates have a
//! validity period and a random serial; the CA directory that issues them ([`crate::ca`]) keeps a
//! record of them and a revocation list, which every node checks in both directions ([`crate::crl`]).
//!
//! What a certificate says and the files of a node's TLS material are in [`cert`], the revocation
//! list and the verifiers that check it in [`crl`] (also `crate::crl`); issuing, loading an identity and
//! the rustls configurations are here.

pub mod cert;
pub mod crl;

pub(crate) use cert::crypto_provider;
pub use cert::{hex, CertInfo, TlsError, TlsFiles, Validity, CRL_FILE};

use crate::types::{format_utc, Role};
use crl::{CrlWatch, RevocationClientVerifier, RevocationServerVerifier};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SerialNumber,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::Path;
use std::sync::Arc;

pub use crate::ca::{issue_to_dir, read_ca, write_ca};

pub const ALPN: &[u8] = b"tessera/1";

/// Days a node certificate is valid for unless told otherwise (`tessera ca issue --days`).
pub const NODE_DAYS: u32 = 365;
/// Days a new CA is valid for unless told otherwise (`tessera ca init --days`).
pub const CA_DAYS: u32 = 3650;
/// A new certificate is valid from this many seconds before it is made, so a peer whose clock is a
/// little behind does not refuse it as not yet valid.
const BACKDATE_S: i64 = 300;

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

// `Validity` itself is in `cert` (a certificate says it); making one and writing it into a new
// certificate are issuing, here.
impl Validity {
    /// From a few minutes ago ([`BACKDATE_S`]) until `days` days from now.
    pub fn days(days: u32) -> Validity {
        let now = unix_now();
        Validity { not_before: now - BACKDATE_S, not_after: now + i64::from(days) * 86_400 }
    }

    fn apply(&self, params: &mut CertificateParams) -> Result<(), TlsError> {
        let at = |t: i64| {
            time::OffsetDateTime::from_unix_timestamp(t)
                .map_err(|e| TlsError::Config(format!("validity {}: {e}", format_utc(t))))
        };
        if self.not_after <= self.not_before {
            return Err(TlsError::Config("a certificate must be valid for some time".into()));
        }
        params.not_before = at(self.not_before)?;
        params.not_after = at(self.not_after)?;
        Ok(())
    }
}

/// A freshly generated CA: certificate and key in PEM.
pub struct CaPem {
    pub cert: String,
    pub key: String,
}

/// A new CA valid for [`CA_DAYS`].
pub fn generate_ca(cluster: &str) -> Result<CaPem, TlsError> {
    generate_ca_valid(cluster, Validity::days(CA_DAYS))
}

/// A new CA valid for `validity`.
pub fn generate_ca_valid(cluster: &str, validity: Validity) -> Result<CaPem, TlsError> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, format!("Tessera CA {cluster}"));
    params.distinguished_name = dn;
    params.serial_number = Some(random_serial());
    validity.apply(&mut params)?;
    let cert = params.self_signed(&key)?;
    Ok(CaPem { cert: cert.pem(), key: key.serialize_pem() })
}

/// The CA as rcgen needs it to sign: its certificate (rebuilt from the PEM, same name and key) and key.
pub(crate) fn ca_signer(ca: &CaPem) -> Result<(rcgen::Certificate, KeyPair), TlsError> {
    let key = KeyPair::from_pem(&ca.key)?;
    let cert = CertificateParams::from_ca_cert_pem(&ca.cert)?.self_signed(&key)?;
    Ok((cert, key))
}

/// 16 random bytes, positive and without a leading zero (so every encoding of it is the same bytes).
fn random_serial() -> SerialNumber {
    let mut b: [u8; 16] = rand::random();
    b[0] = (b[0] & 0x3f) | 0x40;
    SerialNumber::from(b.to_vec())
}

/// A certificate just issued: PEM of the certificate and of its new key, and what it says.
pub struct Issued {
    pub cert: String,
    pub key: String,
    pub info: CertInfo,
}

/// Issues a certificate for node `name` with `role`, signed by the CA, with a new key and serial.
/// `extra_sans` are added to `<role>.tessera` and `localhost` (host names or IP addresses the node is
/// reached at). The validity ends with the CA's at the latest.
pub fn issue(
    ca: &CaPem,
    role: Role,
    name: &str,
    extra_sans: &[String],
    validity: Validity,
) -> Result<Issued, TlsError> {
    let (ca_cert, ca_key) = ca_signer(ca)?;
    let mut sans = vec![server_name(role), "localhost".to_string()];
    for s in extra_sans {
        if !sans.contains(s) {
            sans.push(s.clone());
        }
    }
    let mut params = CertificateParams::new(sans)?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    dn.push(DnType::OrganizationalUnitName, role.as_str());
    dn.push(DnType::OrganizationName, "Tessera");
    params.distinguished_name = dn;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params.serial_number = Some(random_serial());
    let ca_until = ca_cert.params().not_after.unix_timestamp();
    Validity { not_before: validity.not_before, not_after: validity.not_after.min(ca_until) }.apply(&mut params)?;
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &ca_cert, &ca_key)?;
    let info = CertInfo::parse(cert.der()).ok_or_else(|| TlsError::Config("issued certificate unreadable".into()))?;
    Ok(Issued { cert: cert.pem(), key: key.serialize_pem(), info })
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

fn file_err(path: &Path, e: impl std::fmt::Display) -> TlsError {
    TlsError::File { path: path.to_path_buf(), err: e.to_string() }
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
        roots.add(self.ca.clone()).map_err(|e| TlsError::Config(format!("CA certificate: {e}")))?;
        Ok(Arc::new(roots))
    }

    /// rustls server config requiring a client certificate from the cluster CA that is valid now and
    /// not revoked (the revocation list as it is at each handshake).
    pub fn server_config(&self) -> Result<rustls::ServerConfig, TlsError> {
        let provider = crypto_provider();
        let verifier = RevocationClientVerifier::new(self.roots()?, self.crl.clone())?;
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_client_cert_verifier(Arc::new(verifier))
            .with_single_cert(self.chain.clone(), self.key.clone_key())
            .map_err(|e| TlsError::Config(e.to_string()))?;
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
            .map_err(|e| TlsError::Config(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_client_auth_cert(self.chain.clone(), self.key.clone_key())
            .map_err(|e| TlsError::Config(e.to_string()))?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ca::CaDir;
    use rustls::{CertificateError, Error};

    #[test]
    fn issued_cert_carries_role_validity_and_loads() {
        let dir = tempfile::tempdir().unwrap();
        let ca = generate_ca("t").unwrap();
        write_ca(dir.path(), &ca).unwrap();
        let files = issue_to_dir(dir.path(), &ca, Role::Ds, "ds-3", &["127.0.0.1".into()]).unwrap();
        let id = NodeIdentity::load(&files).unwrap();
        assert_eq!(id.role, Role::Ds);
        assert_eq!(id.name, "ds-3");
        id.server_config().unwrap();
        id.client_config().unwrap();
        let info = CertInfo::from_pem(&std::fs::read_to_string(&files.cert).unwrap()).unwrap();
        let now = unix_now();
        assert!(info.validity.not_before <= now && info.validity.not_before >= now - BACKDATE_S - 5);
        let days = (info.validity.not_after - now) as f64 / 86_400.0;
        assert!((days - f64::from(NODE_DAYS)).abs() < 0.01, "{days} days");
        assert_eq!(info.sans, ["ds.tessera", "localhost", "127.0.0.1"]);
        assert_eq!(info.serial.len(), 32);
        let ca_info = x509_parser::parse_x509_certificate(&CertificateDer::from_pem_slice(ca.cert.as_bytes()).unwrap())
            .unwrap()
            .1
            .validity()
            .not_after
            .timestamp();
        assert!(((ca_info - now) as f64 / 86_400.0 - f64::from(CA_DAYS)).abs() < 0.01);
        // A certificate never outlives its CA.
        let long = issue(&ca, Role::Client, "c", &[], Validity::days(CA_DAYS * 2)).unwrap();
        assert_eq!(long.info.validity.not_after, ca_info);
    }

    /// Runs a handshake in memory; `Err((true, e))` when the server refused, `(false, e)` the client.
    fn handshake(client: &NodeIdentity, server: &NodeIdentity) -> Result<(), (bool, Error)> {
        let (cc, sc) = (Arc::new(client.client_config().unwrap()), Arc::new(server.server_config().unwrap()));
        handshake_with(cc, sc).map(|_| ())
    }

    fn handshake_with(
        cc: Arc<rustls::ClientConfig>,
        sc: Arc<rustls::ServerConfig>,
    ) -> Result<(rustls::ClientConnection, rustls::ServerConnection), (bool, Error)> {
        let name = rustls::pki_types::ServerName::try_from(server_name(Role::Ds)).unwrap();
        let mut client = rustls::ClientConnection::new(cc, name).unwrap();
        let mut server = rustls::ServerConnection::new(sc).unwrap();
        for _ in 0..10 {
            let mut buf = Vec::new();
            client.write_tls(&mut buf).unwrap();
            server.read_tls(&mut &buf[..]).unwrap();
            server.process_new_packets().map_err(|e| (true, e))?;
            buf.clear();
            server.write_tls(&mut buf).unwrap();
            client.read_tls(&mut &buf[..]).unwrap();
            client.process_new_packets().map_err(|e| (false, e))?;
        }
        assert!(!client.is_handshaking() && !server.is_handshaking());
        Ok((client, server))
    }

    struct TestCluster {
        dir: tempfile::TempDir,
    }

    impl TestCluster {
        fn new() -> TestCluster {
            let dir = tempfile::tempdir().unwrap();
            write_ca(dir.path(), &generate_ca("t").unwrap()).unwrap();
            TestCluster { dir }
        }

        fn ca(&self) -> CaDir {
            CaDir::open(self.dir.path()).unwrap()
        }

        fn node(&self, role: Role, name: &str, validity: Validity) -> NodeIdentity {
            let (files, _) = self.ca().issue(role, name, &[], validity, true).unwrap();
            NodeIdentity::load(&files).unwrap()
        }
    }

    /// A full mutual-TLS handshake in memory between two cluster nodes settles on AES-128-GCM.
    #[test]
    fn nodes_negotiate_aes_128_gcm() {
        let t = TestCluster::new();
        let (server_id, client_id) =
            (t.node(Role::Ds, "ds0", Validity::days(1)), t.node(Role::Client, "c", Validity::days(1)));
        let (client, server) =
            handshake_with(Arc::new(client_id.client_config().unwrap()), Arc::new(server_id.server_config().unwrap()))
                .unwrap();
        let suite = |s: Option<rustls::SupportedCipherSuite>| s.map(|s| s.suite());
        assert_eq!(suite(client.negotiated_cipher_suite()), Some(rustls::CipherSuite::TLS13_AES_128_GCM_SHA256));
        assert_eq!(suite(server.negotiated_cipher_suite()), Some(rustls::CipherSuite::TLS13_AES_128_GCM_SHA256));
    }

    /// Revocation takes effect in configurations built before it, in both directions, once the
    /// list's file was looked at again (at most a second later).
    #[test]
    fn revoked_peers_are_refused_without_rebuilding_configs() {
        let t = TestCluster::new();
        let day = Validity::days(1);
        let (ds, client, other) =
            (t.node(Role::Ds, "ds0", day), t.node(Role::Client, "c1", day), t.node(Role::Client, "c2", day));
        let ds_server = Arc::new(ds.server_config().unwrap());
        let c1 = Arc::new(client.client_config().unwrap());
        let c2 = Arc::new(other.client_config().unwrap());
        handshake_with(c1.clone(), ds_server.clone()).unwrap();
        handshake_with(c2.clone(), ds_server.clone()).unwrap();

        t.ca().revoke("c1", None).unwrap();
        std::thread::sleep(crate::crl::RECHECK + std::time::Duration::from_millis(100));
        let (by_server, e) = handshake_with(c1.clone(), ds_server.clone()).unwrap_err();
        assert!(by_server, "the server refuses the revoked client");
        assert_eq!(e, Error::InvalidCertificate(CertificateError::Revoked));
        let list = ds.crl.snapshot();
        assert_eq!(list.number.as_deref(), Some("2"));
        let info = CertInfo::parse(&client.chain[0]).unwrap();
        assert!(list.revoked.contains(&info.serial));
        assert_eq!(
            crate::crl::refusal_reason(&e, Some(&info), &list),
            "certificate revoked (revocation list number 2)"
        );
        handshake_with(c2.clone(), ds_server.clone()).expect("other clients keep connecting");

        // A revoked server: clients refuse it, with configs made before the revocation.
        t.ca().revoke("ds0", None).unwrap();
        std::thread::sleep(crate::crl::RECHECK + std::time::Duration::from_millis(100));
        let (by_server, e) = handshake_with(c2.clone(), ds_server.clone()).unwrap_err();
        assert!(!by_server, "the client refuses the revoked server");
        assert_eq!(e, Error::InvalidCertificate(CertificateError::Revoked));

        // Renewed, the data server is accepted again (the old certificate stays revoked).
        let (old, _) = t.ca().renew("ds0", day).unwrap();
        let renewed = NodeIdentity::load(&TlsFiles::in_dir(t.dir.path(), "ds0")).unwrap();
        assert!(renewed.crl.is_revoked(&old.serial));
        handshake_with(c2.clone(), Arc::new(renewed.server_config().unwrap())).unwrap();
    }

    #[test]
    fn expired_and_future_certificates_are_refused_with_the_reason() {
        let t = TestCluster::new();
        let now = unix_now();
        let ds = t.node(Role::Ds, "ds0", Validity::days(1));
        let expired = t.node(Role::Client, "old", Validity { not_before: now - 10 * 86_400, not_after: now - 86_400 });
        let (by_server, e) = handshake(&expired, &ds).unwrap_err();
        assert!(by_server);
        assert!(matches!(e, Error::InvalidCertificate(CertificateError::ExpiredContext { .. })), "{e:?}");
        let info = CertInfo::parse(&expired.chain[0]).unwrap();
        let why = crate::crl::refusal_reason(&e, Some(&info), &ds.crl.snapshot());
        assert_eq!(why, format!("certificate expired at {} UTC", format_utc(now - 86_400)));

        let future = t.node(Role::Client, "new", Validity { not_before: now + 86_400, not_after: now + 2 * 86_400 });
        let (_, e) = handshake(&future, &ds).unwrap_err();
        let info = CertInfo::parse(&future.chain[0]).unwrap();
        let why = crate::crl::refusal_reason(&e, Some(&info), &ds.crl.snapshot());
        assert!(why.starts_with("certificate not valid yet: valid from"), "{why}");

        // An expired server is refused by its clients.
        let old_ds = t.node(Role::Ds, "ds1", Validity { not_before: now - 10 * 86_400, not_after: now - 86_400 });
        let client = t.node(Role::Client, "c", Validity::days(1));
        let (by_server, e) = handshake(&client, &old_ds).unwrap_err();
        assert!(!by_server);
        assert!(matches!(e, Error::InvalidCertificate(CertificateError::ExpiredContext { .. })), "{e:?}");
    }

    /// A list the nodes cannot use (corrupt, or of another CA) is refused at start-up, and at a reload
    /// the list in force stays; a removed list revokes nothing.
    #[test]
    fn bad_revocation_lists_are_not_taken_into_use() {
        let t = TestCluster::new();
        let day = Validity::days(1);
        let (ds, client) = (t.node(Role::Ds, "ds0", day), t.node(Role::Client, "c1", day));
        t.ca().revoke("c1", None).unwrap();
        let crl = t.dir.path().join(CRL_FILE);
        assert_eq!(ds.crl.recheck().revoked.len(), 1);

        let other = tempfile::tempdir().unwrap();
        write_ca(other.path(), &generate_ca("other").unwrap()).unwrap();
        std::fs::copy(other.path().join(CRL_FILE), &crl).unwrap();
        assert_eq!(ds.crl.recheck().revoked.len(), 1, "a foreign list is not used");
        let err = NodeIdentity::load(&TlsFiles::in_dir(t.dir.path(), "ds0")).unwrap_err().to_string();
        assert!(err.contains("not issued by this cluster's CA"), "{err}");
        std::fs::write(&crl, "-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n").unwrap();
        assert_eq!(ds.crl.recheck().revoked.len(), 1, "a corrupt list is not used");
        assert!(handshake(&client, &ds).is_err());

        std::fs::remove_file(&crl).unwrap();
        assert!(ds.crl.recheck().revoked.is_empty());
        handshake(&client, &ds).expect("no list: nothing revoked");
    }
}

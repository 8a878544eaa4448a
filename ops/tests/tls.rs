//! The protocol's TLS (tessera_proto::tls: node identities, rustls configs, revocation checks) with
//! certificates this crate issues: what a certificate carries, mutual handshakes in memory, revocation,
//! expiry and bad revocation lists.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::{CertificateError, Error};
use std::sync::Arc;
use tessera_ops::ca::{issue_to_dir, write_ca, CaDir};
use tessera_ops::issue::{generate_ca, issue, CA_DAYS, NODE_DAYS};
use tessera_proto::tls::{server_name, unix_now, CertInfo, NodeIdentity, TlsFiles, Validity, BACKDATE_S, CRL_FILE};
use tessera_proto::types::{format_utc, Role};

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
    std::thread::sleep(tessera_proto::crl::RECHECK + std::time::Duration::from_millis(100));
    let (by_server, e) = handshake_with(c1.clone(), ds_server.clone()).unwrap_err();
    assert!(by_server, "the server refuses the revoked client");
    assert_eq!(e, Error::InvalidCertificate(CertificateError::Revoked));
    let list = ds.crl.snapshot();
    assert_eq!(list.number.as_deref(), Some("2"));
    let info = CertInfo::parse(&client.chain[0]).unwrap();
    assert!(list.revoked.contains(&info.serial));
    assert_eq!(
        tessera_proto::crl::refusal_reason(&e, Some(&info), &list),
        "certificate revoked (revocation list number 2)"
    );
    handshake_with(c2.clone(), ds_server.clone()).expect("other clients keep connecting");

    // A revoked server: clients refuse it, with configs made before the revocation.
    t.ca().revoke("ds0", None).unwrap();
    std::thread::sleep(tessera_proto::crl::RECHECK + std::time::Duration::from_millis(100));
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
    let why = tessera_proto::crl::refusal_reason(&e, Some(&info), &ds.crl.snapshot());
    assert_eq!(why, format!("certificate expired at {} UTC", format_utc(now - 86_400)));

    let future = t.node(Role::Client, "new", Validity { not_before: now + 86_400, not_after: now + 2 * 86_400 });
    let (_, e) = handshake(&future, &ds).unwrap_err();
    let info = CertInfo::parse(&future.chain[0]).unwrap();
    let why = tessera_proto::crl::refusal_reason(&e, Some(&info), &ds.crl.snapshot());
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
    let err = tessera_proto::error::chain(&NodeIdentity::load(&TlsFiles::in_dir(t.dir.path(), "ds0")).unwrap_err());
    assert!(err.contains("not issued by this cluster's CA"), "{err}");
    std::fs::write(&crl, "-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n").unwrap();
    assert_eq!(ds.crl.recheck().revoked.len(), 1, "a corrupt list is not used");
    assert!(handshake(&client, &ds).is_err());

    std::fs::remove_file(&crl).unwrap();
    assert!(ds.crl.recheck().revoked.is_empty());
    handshake(&client, &ds).expect("no list: nothing revoked");
}

//! Revocation on the nodes: the CA's revocation list, reloaded when its file changes, and the rustls
//! verifiers that consult it in both directions — a server checking a connecting peer
//! ([`RevocationClientVerifier`]) and a node checking the server it connects to
//! ([`RevocationServerVerifier`]).
//!
//! The file is looked at, at most once a second, by handshakes, calls and a servers' task: a changed
//! file (`tessera ca revoke` replaces it) is read, checked (a list that does not parse or is not the
//! cluster CA's is refused, and the previous one stays in force) and used from then on, with no
//! restart. A revoked peer is refused at its next connection; connections it already has are closed as
//! soon as the new list is in force — by a server at once ([`crate::rpc::serve`] waits for
//! [`CrlWatch::subscribe`]), by a node connected to a revoked server at its next call on it. Every
//! refusal is logged with the peer's role, name and serial and the reason (revoked, expired, not yet
//! valid...).

use crate::error::chain;
use crate::tls::cert::{CertInfo, TlsError};
use crate::types::format_utc;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, Error, SignatureScheme};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};
use tracing::{debug, error, info, warn};

/// The revocation list's file is looked at no more often than this.
pub const RECHECK: Duration = Duration::from_secs(1);

/// The revocation list in force.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Changes whenever another list is taken into use.
    pub generation: u64,
    pub crls: Arc<Vec<CertificateRevocationListDer<'static>>>,
    /// The list's CRL number (none without a list).
    pub number: Option<String>,
    /// Serials (hex) of the revoked certificates.
    pub revoked: Arc<HashSet<String>>,
}

impl Snapshot {
    /// The list's number for messages (`none` without a list).
    pub fn number(&self) -> &str {
        self.number.as_deref().unwrap_or("none")
    }
}

/// What identifies a version of the file: a new list replaces the file (new inode) or rewrites it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    mtime: Option<SystemTime>,
    len: u64,
    ino: u64,
}

fn stamp(path: &Path) -> std::io::Result<Option<Stamp>> {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(path) {
        Ok(m) => Ok(Some(Stamp { mtime: m.modified().ok(), len: m.len(), ino: m.ino() })),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

struct State {
    stamp: Option<Stamp>,
    current: Snapshot,
}

/// A node's view of the CA's revocation list (see the module documentation).
pub struct CrlWatch {
    path: PathBuf,
    ca: CertificateDer<'static>,
    /// The node's own certificate: a new list is tried on it, which tells a list of another CA.
    own: CertificateDer<'static>,
    state: Mutex<State>,
    /// When the file is due for a look, in milliseconds since `epoch` (read without the lock: calls
    /// ask for [`CrlWatch::generation`] on their way).
    epoch: Instant,
    next_look_ms: AtomicU64,
    generation: AtomicU64,
    changed: tokio::sync::watch::Sender<u64>,
    looking: AtomicBool,
}

impl std::fmt::Debug for CrlWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock();
        f.debug_struct("CrlWatch")
            .field("path", &self.path)
            .field("number", &s.current.number)
            .field("revoked", &s.current.revoked.len())
            .finish()
    }
}

impl CrlWatch {
    /// Reads the list at `path` (none there: nothing is revoked). An unreadable or invalid list is an
    /// error here, at start-up; later it is logged and the list in force stays.
    pub fn load(
        path: PathBuf,
        ca: CertificateDer<'static>,
        own: CertificateDer<'static>,
    ) -> Result<CrlWatch, TlsError> {
        let st = stamp(&path).map_err(|e| TlsError::file(&path, e))?;
        let mut current = Snapshot::default();
        if st.is_some() {
            current = read_list(&path, &ca, &own).map_err(|e| TlsError::file(&path, e))?;
            debug!(
                "revocation list {}: number {}, {} revoked",
                path.display(),
                current.number(),
                current.revoked.len()
            );
        }
        Ok(CrlWatch {
            path,
            ca,
            own,
            state: Mutex::new(State { stamp: st, current }),
            epoch: Instant::now(),
            next_look_ms: AtomicU64::new(RECHECK.as_millis() as u64),
            generation: AtomicU64::new(0),
            changed: tokio::sync::watch::channel(0).0,
            looking: AtomicBool::new(false),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `revocation list PATH: number N, K revoked` (or that there is none), for a server's start-up log.
    pub fn describe(&self) -> String {
        let s = self.lock();
        match s.stamp {
            Some(_) => format!(
                "revocation list {}: number {}, {} revoked",
                self.path.display(),
                s.current.number(),
                s.current.revoked.len()
            ),
            None => format!("no revocation list at {}: nothing revoked", self.path.display()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The generation of the list in force (it changes with the list), after looking at the file if
    /// it is due ([`RECHECK`]). Cheap when it is not: calls ask on their way.
    pub fn generation(&self) -> u64 {
        let now = self.epoch.elapsed().as_millis() as u64;
        let due = self.next_look_ms.load(Ordering::Relaxed);
        if now >= due
            && self
                .next_look_ms
                .compare_exchange(due, now + RECHECK.as_millis() as u64, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let mut s = self.lock();
            self.reload(&mut s);
        }
        self.generation.load(Ordering::Acquire)
    }

    /// The list in force, after looking at the file if it is due.
    pub fn snapshot(&self) -> Snapshot {
        self.generation();
        self.lock().current.clone()
    }

    /// Looks at the file now, whatever the time since the last look (tests).
    pub fn recheck(&self) -> Snapshot {
        let mut s = self.lock();
        self.reload(&mut s);
        s.current.clone()
    }

    /// Told the new generation whenever another list is taken into use.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Looks at the file every [`RECHECK`] from a task of the current runtime, so that a new list is
    /// taken into use (and [`CrlWatch::subscribe`]rs told) without waiting for a handshake or a call.
    /// Once per watch; the task ends with the watch.
    pub fn keep_looking(self: &Arc<Self>) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        if self.path.as_os_str().is_empty() || self.looking.swap(true, Ordering::AcqRel) {
            return;
        }
        let watch = Arc::downgrade(self);
        rt.spawn(async move {
            let mut tick = tokio::time::interval(RECHECK);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(w) = watch.upgrade() else { return };
                w.generation();
            }
        });
    }

    /// Takes `list` into use as the next generation.
    fn replace(&self, s: &mut State, list: Snapshot) {
        let generation = s.current.generation + 1;
        s.current = Snapshot { generation, ..list };
        self.generation.store(generation, Ordering::Release);
        self.changed.send_replace(generation);
    }

    fn reload(&self, s: &mut State) {
        let st = match stamp(&self.path) {
            Ok(st) => st,
            Err(e) => {
                error!("revocation list {}: {e}; keeping list number {}", self.path.display(), s.current.number());
                return;
            }
        };
        if st == s.stamp {
            return;
        }
        s.stamp = st;
        if st.is_none() {
            warn!("revocation list {} removed: nothing is revoked any more", self.path.display());
            self.replace(s, Snapshot::default());
            return;
        }
        match read_list(&self.path, &self.ca, &self.own) {
            Ok(list) => {
                info!(
                    "revocation list {} reloaded: number {}, {} revoked",
                    self.path.display(),
                    list.number(),
                    list.revoked.len()
                );
                self.replace(s, list);
            }
            Err(e) => error!(
                "revocation list {}: {}; keeping list number {} in force",
                self.path.display(),
                chain(&e),
                s.current.number()
            ),
        }
    }

    /// Whether the certificate with `serial` (hex) is on the list in force.
    pub fn is_revoked(&self, serial: &str) -> bool {
        self.snapshot().revoked.contains(serial)
    }
}

/// What is wrong with a revocation list file ([`CrlWatch`] refuses it, and keeps the list in force).
#[derive(Debug, thiserror::Error)]
pub enum CrlError {
    #[error(transparent)]
    Read(#[from] rustls::pki_types::pem::Error),
    #[error("no revocation list in the file")]
    Empty,
    #[error("not a revocation list")]
    NotAList(#[source] x509_parser::nom::Err<x509_parser::error::X509Error>),
    #[error("not usable: {0:?}")]
    Unusable(rustls::CertRevocationListError),
    #[error("not issued by this cluster's CA")]
    NotOurCa,
    #[error("CA certificate")]
    Ca(#[source] Error),
    #[error(transparent)]
    Verifier(#[from] rustls::server::VerifierBuilderError),
}

/// Reads and checks a revocation list file.
fn read_list(path: &Path, ca: &CertificateDer<'static>, own: &CertificateDer<'static>) -> Result<Snapshot, CrlError> {
    let crls: Vec<CertificateRevocationListDer<'static>> =
        CertificateRevocationListDer::pem_file_iter(path)?.collect::<Result<_, _>>()?;
    if crls.is_empty() {
        return Err(CrlError::Empty);
    }
    let mut revoked = HashSet::new();
    let mut numbers = Vec::new();
    for crl in &crls {
        let (_, parsed) = x509_parser::parse_x509_crl(crl).map_err(CrlError::NotAList)?;
        numbers.push(parsed.crl_number().map(|n| n.to_string()).unwrap_or_else(|| "?".into()));
        revoked.extend(parsed.iter_revoked_certificates().map(|r| crate::tls::cert::hex(r.raw_serial())));
    }
    // Tried on this node's own certificate: a list that is not the CA's (or is corrupt) makes every
    // check fail, so it must not be taken into use.
    let verifier = build_client(&roots(ca)?, &crls)?;
    match verifier.verify_client_cert(own, &[], UnixTime::now()) {
        Err(Error::InvalidCertRevocationList(e)) => return Err(CrlError::Unusable(e)),
        Err(Error::InvalidCertificate(CertificateError::UnknownRevocationStatus)) => return Err(CrlError::NotOurCa),
        _ => {}
    }
    Ok(Snapshot { generation: 0, crls: Arc::new(crls), number: Some(numbers.join("+")), revoked: Arc::new(revoked) })
}

fn roots(ca: &CertificateDer<'static>) -> Result<Arc<rustls::RootCertStore>, CrlError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).map_err(CrlError::Ca)?;
    Ok(Arc::new(roots))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    crate::tls::cert::crypto_provider()
}

fn build_client(
    roots: &Arc<rustls::RootCertStore>,
    crls: &[CertificateRevocationListDer<'static>],
) -> Result<Arc<dyn ClientCertVerifier>, rustls::server::VerifierBuilderError> {
    rustls::server::WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
        .with_crls(crls.iter().cloned())
        .build()
}

fn build_server(
    roots: &Arc<rustls::RootCertStore>,
    crls: &[CertificateRevocationListDer<'static>],
) -> Result<Arc<dyn ServerCertVerifier>, rustls::server::VerifierBuilderError> {
    let v = rustls::client::WebPkiServerVerifier::builder_with_provider(roots.clone(), provider())
        .with_crls(crls.iter().cloned())
        .build()?;
    Ok(v)
}

/// Builds a verifier trusting `roots` and checking the lists given.
type Build<V> = fn(
    &Arc<rustls::RootCertStore>,
    &[CertificateRevocationListDer<'static>],
) -> Result<Arc<V>, rustls::server::VerifierBuilderError>;

/// A verifier built for one revocation list, rebuilt when another is in force.
struct Cached<V: ?Sized> {
    roots: Arc<rustls::RootCertStore>,
    crl: Arc<CrlWatch>,
    /// Built without a list: root hints and handshake signatures, which no list changes.
    base: Arc<V>,
    current: Mutex<(u64, Arc<V>)>,
    build: Build<V>,
}

impl<V: ?Sized> std::fmt::Debug for Cached<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cached").field("crl", &self.crl).finish()
    }
}

impl<V: ?Sized> Cached<V> {
    fn new(roots: Arc<rustls::RootCertStore>, crl: Arc<CrlWatch>, build: Build<V>) -> Result<Cached<V>, TlsError> {
        let base = build(&roots, &[]).map_err(TlsError::Verifier)?;
        let snap = crl.snapshot();
        let current = build(&roots, &snap.crls).map_err(TlsError::Verifier)?;
        Ok(Cached { roots, crl, base, current: Mutex::new((snap.generation, current)), build })
    }

    /// The verifier for the list in force, and that list.
    fn get(&self) -> (Arc<V>, Snapshot) {
        let snap = self.crl.snapshot();
        let mut cur = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if cur.0 != snap.generation {
            match (self.build)(&self.roots, &snap.crls) {
                Ok(v) => *cur = (snap.generation, v),
                // Cannot happen for a list read_list accepted; the previous verifier stays.
                Err(e) => error!("revocation list {}: {}", self.crl.path().display(), chain(&e)),
            }
        }
        (cur.1.clone(), snap)
    }
}

/// Why a peer's certificate was refused, in words: `certificate revoked (revocation list 3)`,
/// `certificate expired at 2026-01-02 03:04:05 UTC`...
pub fn refusal_reason(e: &Error, cert: Option<&CertInfo>, list: &Snapshot) -> String {
    let at = |f: fn(&CertInfo) -> i64| cert.map(|c| format!(" at {} UTC", format_utc(f(c)))).unwrap_or_default();
    match e {
        Error::InvalidCertificate(CertificateError::Revoked) => {
            format!("certificate revoked (revocation list number {})", list.number())
        }
        Error::InvalidCertificate(CertificateError::Expired | CertificateError::ExpiredContext { .. }) => {
            format!("certificate expired{}", at(|c| c.validity.not_after))
        }
        Error::InvalidCertificate(CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. }) => {
            let from = cert.map(|c| format!(": valid from {} UTC", format_utc(c.validity.not_before)));
            format!("certificate not valid yet{} (is a clock wrong?)", from.unwrap_or_default())
        }
        other => other.to_string(),
    }
}

/// Logs a refused certificate: `{what} client 'c1' (certificate serial ...): certificate revoked ...`.
fn log_refusal(what: &str, cert: &CertificateDer<'_>, e: &Error, list: &Snapshot) {
    let info = CertInfo::parse(cert);
    let who = info.as_ref().map(CertInfo::who).unwrap_or_else(|| "a peer without a Tessera certificate".into());
    warn!("{what} {who}: {}", refusal_reason(e, info.as_ref(), list));
}

/// The handshake signature checks of both verifier traits (the same methods), which no revocation list
/// changes: done by the verifier built without one.
macro_rules! signatures_by_base {
    () => {
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            self.0.base.verify_tls12_signature(message, cert, dss)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            self.0.base.verify_tls13_signature(message, cert, dss)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.0.base.supported_verify_schemes()
        }
    };
}

/// Server side: a client certificate must come from the CA, be valid now and not be revoked.
#[derive(Debug)]
pub struct RevocationClientVerifier(Cached<dyn ClientCertVerifier>);

impl RevocationClientVerifier {
    pub fn new(roots: Arc<rustls::RootCertStore>, crl: Arc<CrlWatch>) -> Result<Self, TlsError> {
        Ok(RevocationClientVerifier(Cached::new(roots, crl, build_client)?))
    }
}

impl ClientCertVerifier for RevocationClientVerifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.0.base.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        let (v, list) = self.0.get();
        v.verify_client_cert(end_entity, intermediates, now).inspect_err(|e| {
            log_refusal("refusing connection from", end_entity, e, &list);
        })
    }

    signatures_by_base!();
}

/// Client side: the server's certificate must come from the CA, name the role asked for, be valid
/// now and not be revoked.
#[derive(Debug)]
pub struct RevocationServerVerifier(Cached<dyn ServerCertVerifier>);

impl RevocationServerVerifier {
    pub fn new(roots: Arc<rustls::RootCertStore>, crl: Arc<CrlWatch>) -> Result<Self, TlsError> {
        Ok(RevocationServerVerifier(Cached::new(roots, crl, build_server)?))
    }
}

impl ServerCertVerifier for RevocationServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let (v, list) = self.0.get();
        v.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now).inspect_err(|e| {
            log_refusal("refusing server", end_entity, e, &list);
        })
    }

    signatures_by_base!();

    fn root_hint_subjects(&self) -> Option<&[DistinguishedName]> {
        self.0.base.root_hint_subjects()
    }
}

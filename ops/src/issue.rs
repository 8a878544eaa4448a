//! Issuing (rcgen): a new cluster CA, and node certificates signed by it. A node certificate carries its
//! role in the subject's OU and its name in the CN, the SAN `<role>.tessera` (the server name clients
//! connect with, so TLS itself proves a server's role), a validity period and a random serial. What a
//! certificate says and how nodes check it are the protocol's (`tessera_proto::tls`).

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SerialNumber,
};
use tessera_proto::tls::{server_name, CertInfo, TlsError, Validity};
use tessera_proto::types::{format_utc, Role};

/// An error of rcgen as the TLS error of the protocol crate (its source kept).
pub(crate) fn gen(e: rcgen::Error) -> TlsError {
    TlsError::Gen(Box::new(e))
}

/// Days a node certificate is valid for unless told otherwise (`tessera ca issue --days`).
pub const NODE_DAYS: u32 = 365;
/// Days a new CA is valid for unless told otherwise (`tessera ca init --days`).
pub const CA_DAYS: u32 = 3650;
/// Writes `v` into a new certificate's parameters.
fn apply_validity(v: &Validity, params: &mut CertificateParams) -> Result<(), TlsError> {
    let at = |t: i64| {
        time::OffsetDateTime::from_unix_timestamp(t)
            .map_err(|e| TlsError::Config(format!("validity {}: {e}", format_utc(t))))
    };
    if v.not_after <= v.not_before {
        return Err(TlsError::Config("a certificate must be valid for some time".into()));
    }
    params.not_before = at(v.not_before)?;
    params.not_after = at(v.not_after)?;
    Ok(())
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
    let key = KeyPair::generate().map_err(gen)?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(gen)?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, format!("Tessera CA {cluster}"));
    params.distinguished_name = dn;
    params.serial_number = Some(random_serial());
    apply_validity(&validity, &mut params)?;
    let cert = params.self_signed(&key).map_err(gen)?;
    Ok(CaPem { cert: cert.pem(), key: key.serialize_pem() })
}

/// The CA as rcgen needs it to sign: its certificate (rebuilt from the PEM, same name and key) and key.
pub(crate) fn ca_signer(ca: &CaPem) -> Result<(rcgen::Certificate, KeyPair), TlsError> {
    let key = KeyPair::from_pem(&ca.key).map_err(gen)?;
    let cert = CertificateParams::from_ca_cert_pem(&ca.cert).and_then(|p| p.self_signed(&key)).map_err(gen)?;
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
    let mut params = CertificateParams::new(sans).map_err(gen)?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    dn.push(DnType::OrganizationalUnitName, role.as_str());
    dn.push(DnType::OrganizationName, "Tessera");
    params.distinguished_name = dn;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params.serial_number = Some(random_serial());
    let ca_until = ca_cert.params().not_after.unix_timestamp();
    apply_validity(
        &Validity { not_before: validity.not_before, not_after: validity.not_after.min(ca_until) },
        &mut params,
    )?;
    let key = KeyPair::generate().map_err(gen)?;
    let cert = params.signed_by(&key, &ca_cert, &ca_key).map_err(gen)?;
    let info = CertInfo::parse(cert.der()).ok_or_else(|| TlsError::Config("issued certificate unreadable".into()))?;
    Ok(Issued { cert: cert.pem(), key: key.serialize_pem(), info })
}

//! Certificates for a test: a fresh CA written into a temporary directory, and node identities it issues
//! (for 127.0.0.1).

use std::path::Path;
use tessera_ops::issue::CaPem;
use tessera_proto::tls::{NodeIdentity, TlsFiles};
use tessera_proto::types::Role;

/// A CA whose files (`ca.pem`, `ca.key`, and every issued `NAME.pem`/`NAME.key`) live in [`TestCa::dir`].
pub struct TestCa {
    pub dir: tempfile::TempDir,
    pub ca: CaPem,
}

impl TestCa {
    /// A new CA for cluster `name`, written to a fresh temporary directory.
    pub fn new(name: &str) -> TestCa {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = tessera_ops::issue::generate_ca(name).expect("generate CA");
        tessera_ops::ca::write_ca(dir.path(), &ca).expect("write CA");
        TestCa { dir, ca }
    }

    /// The directory holding the CA and the issued certificates.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Issues `name` with `role` (valid for 127.0.0.1) and returns its files.
    pub fn issue(&self, role: Role, name: &str) -> TlsFiles {
        tessera_ops::ca::issue_to_dir(self.dir.path(), &self.ca, role, name, &["127.0.0.1".into()])
            .expect("issue certificate")
    }

    /// Issues `name` with `role` and loads it.
    pub fn identity(&self, role: Role, name: &str) -> NodeIdentity {
        NodeIdentity::load(&self.issue(role, name)).expect("load identity")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_identities_carry_their_role() {
        let ca = TestCa::new("t");
        let id = ca.identity(Role::Ds, "ds3");
        assert_eq!((id.role, id.name.as_str()), (Role::Ds, "ds3"));
        assert!(ca.path().join("ca.pem").is_file() && ca.path().join("ds3.key").is_file());
    }
}

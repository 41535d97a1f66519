//! Test certificates (rcgen): a CA and a server certificate it signs, in PEM. Shared by the
//! lib's store tests (`src/db/pg_tls.rs`) and the end-to-end suites through `tests/common`.

/// A CA: its certificate (PEM) and what signs with it.
pub struct TestCa {
    pub pem: String,
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

impl TestCa {
    pub fn new(name: &str) -> TestCa {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("self-signed CA");
        TestCa {
            pem: cert.pem(),
            cert,
            key,
        }
    }

    /// A server certificate for `names` (DNS names or IP addresses) and its key, in PEM.
    pub fn server(&self, names: &[&str]) -> (String, String) {
        let key = rcgen::KeyPair::generate().expect("key");
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let cert = rcgen::CertificateParams::new(names)
            .expect("params")
            .signed_by(&key, &self.cert, &self.key)
            .expect("signed");
        (cert.pem(), key.serialize_pem())
    }
}

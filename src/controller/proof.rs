//! Proof that a judgement was recorded by this operator. Every judgement the operator records
//! (in `status.judgements`, `status.acceptance` and on its evidence ConfigMap) carries
//! `proof`: an HMAC-SHA256 over the judgement's fields and the deployment's UID, keyed by the
//! verdict key, a Secret that only the operator's ServiceAccount may read. A judgement whose
//! proof does not verify (typed into the status by someone with `deepinferdeployments/status`
//! rights, put on a ConfigMap labelled as evidence, copied from another deployment) is not a
//! judgement: it neither grants nor withdraws service, wherever it was read.

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use kube::Client;
use ring::hmac;

use crate::api::AcceptanceStatus;

/// Default name of the verdict key Secret (`--verdict-key-secret`).
pub const DEFAULT_SECRET_NAME: &str = "deepinfer-operator-verdict-key";
/// The Secret's key holding the HMAC key.
pub const SECRET_KEY: &str = "key";
/// Bytes of a key the operator generates.
const KEY_BYTES: usize = 32;
/// Domain separation: a proof of a judgement is never a valid MAC of anything else.
const CONTEXT: &str = "deepinfer.io/judgement/v1";

/// The key judgements are proved with.
#[derive(Clone)]
pub struct VerdictKey(hmac::Key);

impl std::fmt::Debug for VerdictKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("VerdictKey(<secret>)")
    }
}

impl VerdictKey {
    /// A key from its secret bytes.
    pub fn new(secret: &[u8]) -> Self {
        Self(hmac::Key::new(hmac::HMAC_SHA256, secret))
    }

    /// `judgement` with the proof that this operator recorded it for the deployment `uid`.
    pub fn seal(&self, uid: &str, mut judgement: AcceptanceStatus) -> AcceptanceStatus {
        judgement.proof = None;
        let tag = hmac::sign(&self.0, &message(uid, &judgement));
        judgement.proof = Some(hex(tag.as_ref()));
        judgement
    }

    /// Whether `judgement` carries a valid proof for the deployment `uid`.
    pub fn verifies(&self, uid: &str, judgement: &AcceptanceStatus) -> bool {
        let Some(tag) = judgement.proof.as_deref().and_then(unhex) else {
            return false;
        };
        let unsealed = AcceptanceStatus {
            proof: None,
            ..judgement.clone()
        };
        hmac::verify(&self.0, &message(uid, &unsealed), &tag).is_ok()
    }
}

/// What a proof covers: the context, the deployment's UID and the judgement without its proof.
fn message(uid: &str, judgement: &AcceptanceStatus) -> Vec<u8> {
    serde_json::to_vec(&(CONTEXT, uid, judgement)).unwrap_or_default()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 || !text.is_ascii() {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

/// The verdict key from Secret `namespace/name`, if it exists and holds one.
pub async fn load(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Option<VerdictKey>, kube::Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    Ok(api.get_opt(name).await?.as_ref().and_then(key_of))
}

/// Creates Secret `namespace/name` with a random key and returns it (the operator's
/// ServiceAccount may create Secrets in its own namespace and read that one); when another
/// replica created it first, theirs.
pub async fn create(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<VerdictKey, kube::Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut secret_bytes = [0u8; KEY_BYTES];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut secret_bytes)
        .map_err(|_| kube::Error::Service("the system's random source failed".into()))?;
    let secret = Secret {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(std::collections::BTreeMap::from([(
                "app.kubernetes.io/name".to_string(),
                "deepinfer-operator".to_string(),
            )])),
            ..Default::default()
        },
        data: Some(std::collections::BTreeMap::from([(
            SECRET_KEY.to_string(),
            k8s_openapi::ByteString(secret_bytes.to_vec()),
        )])),
        immutable: Some(true),
        ..Default::default()
    };
    match api.create(&PostParams::default(), &secret).await {
        Ok(created) => key_of(&created).ok_or_else(|| missing(namespace, name)),
        // Another replica created it first: use theirs.
        Err(kube::Error::Api(e)) if e.code == 409 => api
            .get(name)
            .await
            .and_then(|s| key_of(&s).ok_or_else(|| missing(namespace, name))),
        Err(e) => Err(e),
    }
}

fn key_of(secret: &Secret) -> Option<VerdictKey> {
    let bytes = &secret.data.as_ref()?.get(SECRET_KEY)?.0;
    (bytes.len() >= 16).then(|| VerdictKey::new(bytes))
}

fn missing(namespace: &str, name: &str) -> kube::Error {
    kube::Error::Service(
        format!("Secret {namespace}/{name} holds no `{SECRET_KEY}` of at least 16 bytes; delete it so that the operator makes a new verdict key (every judgement is then judged again)").into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::AcceptanceResult;

    fn judgement() -> AcceptanceStatus {
        AcceptanceStatus {
            revision: "r1".into(),
            result: AcceptanceResult::Passed,
            prompts: 3,
            passed: 3,
            ..AcceptanceStatus::default()
        }
    }

    #[test]
    fn a_sealed_judgement_verifies_for_its_deployment_only_and_any_change_breaks_it() {
        let key = VerdictKey::new(b"0123456789abcdef0123456789abcdef");
        let sealed = key.seal("uid-1", judgement());
        assert!(key.verifies("uid-1", &sealed));
        assert!(!key.verifies("uid-2", &sealed), "another deployment's");
        assert!(!key.verifies("uid-1", &judgement()), "no proof");
        let other = VerdictKey::new(b"another key, another operator....");
        assert!(!other.verifies("uid-1", &sealed), "another key");
        let mut forged = sealed.clone();
        forged.revision = "r2".into();
        assert!(!key.verifies("uid-1", &forged), "moved to another revision");
        let mut flipped = key.seal(
            "uid-1",
            AcceptanceStatus {
                result: AcceptanceResult::Failed,
                ..judgement()
            },
        );
        flipped.result = AcceptanceResult::Passed;
        assert!(
            !key.verifies("uid-1", &flipped),
            "a failure turned into a pass"
        );
        let mut garbage = sealed;
        garbage.proof = Some("zz".into());
        assert!(!key.verifies("uid-1", &garbage));
        // Through the status's JSON and back, as the operator reads it.
        let read: AcceptanceStatus =
            serde_json::from_str(&serde_json::to_string(&key.seal("u", judgement())).unwrap())
                .unwrap();
        assert!(key.verifies("u", &read));
    }
}

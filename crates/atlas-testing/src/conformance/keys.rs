//! The `KeyStore` port: access keys kept and revoked.

use super::*;

pub fn access_keys_are_kept_and_revoked<S: Store>(make: Make<S>) {
    let subject = make();
    runtime().block_on(async {
        let store = subject.store.as_ref();
        assert!(store.keys().await.unwrap().is_empty());
        let key = |id: &str, user: Option<&str>, agent: Option<&str>, role, at| AccessKey {
            id: id.into(),
            token_sha256: format!("{id}{}", "0".repeat(64 - id.len())),
            tenant: Scope { user: user.map(Into::into), agent: agent.map(Into::into), session: None },
            role,
            created_at: Timestamp(at),
            revoked_at: None,
        };
        let ann = key("aaaaaaaaaaaa", Some("ann"), None, Role::Write, 10);
        let bot = key("bbbbbbbbbbbb", Some("bob"), Some("helper"), Role::Read, 20);
        let admin = key("cccccccccccc", None, None, Role::Admin, 30);
        for k in [&bot, &ann, &admin] {
            store.add_key(k.clone()).await.unwrap();
        }
        assert_eq!(store.keys().await.unwrap(), vec![ann.clone(), bot.clone(), admin.clone()], "oldest first, whole");
        assert!(matches!(store.add_key(ann.clone()).await, Err(AtlasError::InvalidInput { .. })), "one id once");
        assert!(store.revoke_key(bot.id.clone(), Timestamp(40)).await.unwrap());
        assert!(!store.revoke_key(bot.id.clone(), Timestamp(50)).await.unwrap(), "revoked once");
        assert!(!store.revoke_key("nonexistent".into(), Timestamp(50)).await.unwrap());
        let keys = store.keys().await.unwrap();
        assert_eq!(keys[1].revoked_at, Some(Timestamp(40)), "the first revocation's time is kept");
        assert!(keys[0].is_live() && keys[2].is_live());
        assert_eq!(store.stats().await.unwrap().memories(), 0, "keys are not memories");
    });
}

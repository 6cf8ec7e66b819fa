//! Someone without the token hammering a daemon's port cannot fill its log: the refusals
//! are counted one by one and logged once per address and minute.

use super::Daemon;
use crate::common::{TempDir, real_network};
use overlay::net::auth::authenticate_with_token;
use overlay::net::identity::{ANY_NODE, Identity};
use overlay::net::token::{JoinToken, Role};
use std::time::Duration;

#[test]
fn two_hundred_refused_connections_make_one_log_line_and_a_count() {
    let _net = real_network();
    let base = TempDir::new("log-flood");
    let d = Daemon::start(base.path(), "a", &["--listen", "127.0.0.1:0"]);
    let addr = d.addr();
    let attempts = 200;
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let refused = runtime.block_on(async {
        let wrong = JoinToken::generate();
        let mut refused = 0;
        for _ in 0..attempts {
            // A fresh identity each time, as an attacker would.
            let identity = Identity::generate().expect("identity");
            let endpoint =
                quinn::Endpoint::client("127.0.0.1:0".parse().expect("addr")).expect("endpoint");
            let config = identity.client_config().expect("client config");
            let connecting = endpoint
                .connect_with(config, addr, ANY_NODE)
                .expect("connect");
            let conn = tokio::time::timeout(Duration::from_secs(10), connecting)
                .await
                .expect("handshake in time")
                .expect("handshake");
            let outcome =
                authenticate_with_token(&conn, &wrong, Role::Dialer, Duration::from_secs(5)).await;
            if outcome.is_err() {
                refused += 1;
            }
            endpoint.close(0u32.into(), b"");
        }
        refused
    });
    assert_eq!(refused, attempts, "a wrong token was admitted");
    let out = d.cli(&["status", "--json"]);
    assert!(out.status.success(), "{}", out.stderr);
    let s: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    let counted = s["refused_connections"].as_u64().expect("counter");
    assert!(
        counted >= attempts,
        "{counted} of {attempts} refusals counted"
    );
    let log = d.log_text();
    let lines = log
        .lines()
        .filter(|l| l.contains("refused an inbound connection"))
        .count();
    assert_eq!(lines, 1, "one line per address and minute:\n{log}");
    eprintln!("{attempts} refused connections: counted {counted}, logged {lines} line(s)");
}

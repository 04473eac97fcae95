//! No request ever reaches a file outside the root: a table of hostile
//! targets, each sent raw over its own connection.

mod common;

use common::TestServer;

#[test]
fn hostile_targets_are_refused() {
    let s = TestServer::start("traversal", |_| {});
    let abs = s.dir.0.join("outside/secret.txt");
    let abs = abs.to_str().unwrap();
    let table: Vec<(String, u16)> = vec![
        ("/../outside/secret.txt".into(), 400),
        ("/%2e%2e/outside/secret.txt".into(), 400),
        ("/%2E%2E/outside/secret.txt".into(), 400),
        ("/.%2e/outside/secret.txt".into(), 400),
        ("/%2e./outside/secret.txt".into(), 400),
        ("/./../outside/secret.txt".into(), 400),
        ("/sub/../../outside/secret.txt".into(), 400),
        ("/sub/%2e%2e/%2e%2e/outside/secret.txt".into(), 400),
        ("/..%2foutside%2fsecret.txt".into(), 400),
        ("/%2e%2e%2foutside%2fsecret.txt".into(), 400),
        // A backslash separates nothing (nginx looks such a name up too).
        ("/..\\outside\\secret.txt".into(), 404),
        ("/%5c..%5coutside%5csecret.txt".into(), 404),
        ("/%c0%ae%c0%ae/outside/secret.txt".into(), 400),
        ("/hello.txt%00.html".into(), 400),
        ("/sub/%0d%0aX: y".replace(' ', "%20"), 400),
        ("http://evil.example/../outside/secret.txt".into(), 400),
        ("file:///etc/passwd".into(), 400),
        ("*".into(), 400),
        ("/link_out".into(), 403),
        ("/link_abs".into(), 403),
        ("/dir_out/secret.txt".into(), 403),
        ("/sub2/".into(), 403),
        ("/loop".into(), 403),
        // Absolute paths are taken relative to the root.
        (abs.to_owned(), 404),
        ("//etc/passwd".into(), 404),
        ("/etc/passwd".into(), 404),
        // Double encoding decodes once: a file literally named "%2e%2e".
        ("/%252e%252e/outside/secret.txt".into(), 404),
    ];
    assert!(table.len() >= 15);
    for (target, want) in &table {
        for method in ["GET", "HEAD"] {
            let mut c = s.client();
            c.send(format!("{method} {target} HTTP/1.1\r\nHost: t\r\n\r\n"));
            let r = c.response(method == "HEAD");
            assert_eq!(r.status, *want, "{method} {target}");
            assert!(!r.text().contains("TOP SECRET"), "{method} {target} leaked");
        }
    }
    // The server is still fine.
    assert_eq!(s.client().get("/hello.txt").status, 200);
}

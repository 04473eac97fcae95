//! Protocol edges that real clients and hostile ones reach (issue 14),
//! over real sockets.

mod common;

use common::TestServer;

#[test]
fn if_modified_since_in_the_future_is_ignored() {
    let s = TestServer::start("ims-future", |_| {});
    let mut c = s.client();
    let lm = c
        .get("/hello.txt")
        .header("last-modified")
        .unwrap()
        .to_owned();
    assert_eq!(
        c.get_with("/hello.txt", &format!("If-Modified-Since: {lm}\r\n"))
            .status,
        304
    );
    // Later than the server's clock: invalid (RFC 9110 §13.1.3), so the
    // file is sent as if the field were absent.
    let r = c.get_with(
        "/hello.txt",
        "If-Modified-Since: Fri, 01 Jan 2100 00:00:00 GMT\r\n",
    );
    assert_eq!((r.status, r.text().as_str()), (200, "hello, world\n"));
}

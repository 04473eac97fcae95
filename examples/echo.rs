//! A TCP echo server in thread style: one task per connection, written as
//! straight-line code. `cargo run --example echo -- 127.0.0.1:7000`
use duality_rt::net::{TcpListener, TcpStream};
use duality_rt::{block_on, spawn};
use std::io;

async fn echo(stream: TcpStream) -> io::Result<()> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(()); // the client closed
        }
        stream.write_all(&buf[..n]).await?;
    }
}

fn main() -> io::Result<()> {
    let arg = std::env::args().nth(1);
    let addr = arg.as_deref().unwrap_or("127.0.0.1:7000");
    let addr = addr.parse().map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{addr:?}: give ADDRESS:PORT ({e})"),
        )
    })?;
    block_on(async {
        let listener = TcpListener::bind(addr)?;
        println!("echo server on {}", listener.local_addr()?);
        loop {
            match listener.accept().await {
                Ok((stream, _peer)) => drop(spawn(echo(stream))),
                // Out of descriptors: the next accept backs off by itself.
                Err(e) => eprintln!("accept: {e}"),
            }
        }
    })
}

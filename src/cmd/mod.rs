//! One module per subcommand.

pub mod bench;
pub mod bench_fairness;
pub mod bench_http;
pub mod bench_kv;
pub mod http;
pub mod internal;
pub mod kv;

/// Blocks until SIGTERM or SIGINT.
pub fn wait_for_termination() -> anyhow::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
    ])?;
    signals.forever().next();
    Ok(())
}

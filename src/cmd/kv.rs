//! `duality kv`: the memcached-compatible cache (under construction).

use clap::Args;

#[derive(Args)]
pub struct KvArgs {
    /// TCP port.
    #[arg(short = 'p', long, default_value_t = 11211)]
    port: u16,
}

pub fn run(a: KvArgs) -> anyhow::Result<()> {
    anyhow::bail!("duality kv is not built yet (port {})", a.port)
}

//! `duality bench http` (under construction).

use clap::Args;

#[derive(Args)]
pub struct HttpBenchArgs {
    /// Print a JSON array instead of a Markdown table.
    #[arg(long)]
    json: bool,
}

pub fn run(a: HttpBenchArgs) -> anyhow::Result<()> {
    anyhow::bail!("duality bench http is not built yet (json: {})", a.json)
}

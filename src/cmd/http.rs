//! `duality http`: the static-file web server (under construction).

use clap::Args;

#[derive(Args)]
pub struct HttpArgs {
    /// Directory to serve.
    #[arg(long)]
    root: std::path::PathBuf,
}

pub fn run(a: HttpArgs) -> anyhow::Result<()> {
    anyhow::bail!("duality http is not built yet (root {})", a.root.display())
}
